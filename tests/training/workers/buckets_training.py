"""DistributedTrainer(gradient_as_bucket_view=True) (issue 4, item 2): the same parameters
as without bucket views and as one process trained on the concatenated batch, on every rank.

Usage: train_buckets.py [scenario ...]     (default: all)
"""
import os
import tempfile

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd
from training_common import (assert_close, assert_same_on_all_ranks, copy_params, global_data,
                          mlp, optimizer, param_arrays, run_scenarios, shard, CLASSES, HIDDEN,
                          IN)

B = 4
STEPS = 3
# A cap of a few hundred bytes splits the small test models into several buckets.
SMALL_CAP_MB = 200.0 / 2**20


def forward_backward(net, xb, yb):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    with autograd.record():
        loss = loss_fn(net(mx.nd.array(xb)), mx.nd.array(yb))
    loss.backward()


def train(net, trainer, xs, ys, steps, after_step=None):
    for s in range(steps):
        forward_backward(net, xs[s], ys[s])
        trainer.step(xs[s].shape[0])
        if after_step:
            after_step(s)


def pair(make_net, tag):
    """A distributed net (rank 0's initial values) and a local copy for the reference."""
    net = make_net(tag + "_dist_")
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    ref = make_net(tag + "_ref_")
    copy_params(net, ref)
    return net, ref


def reference(ref, opt_kind, x, y, steps):
    tr = gluon.Trainer(ref.collect_params(), optimizer(opt_kind), kvstore=None)
    train(ref, tr, x, y, steps)
    return param_arrays(ref)


def assert_identical(got, want, what):
    """With and without bucket views: the same sums in the same order, bit for bit, on 2
    ranks; from 3 ranks on MPI may add in another order for another message size."""
    for k, (g, w) in enumerate(zip(got, want)):
        if hvd.size() == 2:
            np.testing.assert_array_equal(g, w, err_msg="%s: array %d" % (what, k))
        else:
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7,
                                       err_msg="%s: array %d" % (what, k))


def bucket_summary(trainer):
    return [(b.dtype.name, list(b.indices)) for b in trainer._buckets.buckets]


def equivalence(opt_kind, hybridize=False):
    """No buckets, one bucket (default cap), several buckets: all equal one process."""
    x, y = global_data(STEPS, B, seed=11)
    xs, ys = shard(x, B), shard(y, B)
    results = {}
    start, _ = pair(mlp, "eq_start_%s" % opt_kind)  # the same initial values for every run
    for tag, kwargs in (("plain", {}),
                        ("one", dict(gradient_as_bucket_view=True)),
                        ("many", dict(gradient_as_bucket_view=True, bucket_cap_mb=SMALL_CAP_MB))):
        name = "eq_%s_%s%s" % (opt_kind, tag, "_hyb" if hybridize else "")
        net, ref = mlp(name + "_dist_"), mlp(name + "_ref_")
        copy_params(start, net)
        copy_params(start, ref)
        if hybridize:
            net.hybridize(static_alloc=True, static_shape=True)
        tr = hvd.DistributedTrainer(net.collect_params(), optimizer(opt_kind), **kwargs)
        train(net, tr, xs, ys, STEPS)
        got = param_arrays(net)
        assert_close(got, reference(ref, opt_kind, x, y, STEPS), 0.1, name)
        assert_same_on_all_ranks(got, name)
        results[tag] = got
        if kwargs:
            buckets = tr._buckets.buckets
            assert tr._buckets.builds == 1, tr._buckets.builds
            # many: [dense1 bias, weight] (64 + 128 aligned bytes), [dense0 bias], [dense0
            # weight (320 bytes)], each bucket at most 200 bytes.
            assert len(buckets) == (1 if tag == "one" else 3), bucket_summary(tr)
            # Last layer first: dense1's gradients lead the layout.
            order = [tr._params[i].name for b in buckets for i in b.indices]
            assert order[0].startswith(name + "_dist_dense1_"), order
            for b in buckets:
                for i, v in zip(b.indices, b.views):
                    assert tr._params[i].grad() is v
    assert_identical(results["one"], results["plain"], "one bucket vs plain")
    assert_identical(results["many"], results["plain"], "many buckets vs plain")


def allreduce_grads_reads_mean():
    """allreduce_grads() right after backward (no wait): each bucket's buffer and every
    view hold the mean gradient, i.e. the allreduce ran after all of backward's writes."""
    x, y = global_data(2, B, seed=12)
    net, ref = pair(mlp, "mean")
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"),
                                gradient_as_bucket_view=True, bucket_cap_mb=SMALL_CAP_MB)
    ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    for s in range(2):
        forward_backward(net, shard(x, B)[s], shard(y, B)[s])
        tr.allreduce_grads()
        forward_backward(ref, x[s], y[s])
        # The reference holds the gradient summed over the whole batch; the mean over
        # ranks of the per-rank sums is that divided by size.
        want = {p.name.replace("mean_ref_", ""): p.grad().asnumpy() / hvd.size()
                for p in ref.collect_params().values()}
        for b in tr._buckets.buckets:
            flat = b.flat.asnumpy()
            for i, off in zip(b.indices, b.offsets):
                p = tr._params[i]
                w = want[p.name.replace("mean_dist_", "")]
                np.testing.assert_allclose(flat[off:off + w.size].reshape(w.shape), w,
                                           rtol=1e-5, atol=1e-7, err_msg=p.name)
                np.testing.assert_allclose(p.grad().asnumpy(), w, rtol=1e-5, atol=1e-7)
        tr.update(B)
        ref_tr.update(B * hvd.size())
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "allreduce_grads then update")


def grad_req_add():
    """Two backward passes accumulate into the views; zero_grad zeroes them."""
    x, y = global_data(2, 2 * B, seed=13)
    net, ref = pair(mlp, "badd")
    net.collect_params().setattr("grad_req", "add")
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"),
                                gradient_as_bucket_view=True, bucket_cap_mb=SMALL_CAP_MB)
    ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    for s in range(2):
        xs, ys = shard(x, 2 * B)[s], shard(y, 2 * B)[s]
        forward_backward(net, xs[:B], ys[:B])
        forward_backward(net, xs[B:], ys[B:])
        tr.step(2 * B)
        net.collect_params().zero_grad()
        for b in tr._buckets.buckets:
            assert not b.flat.asnumpy().any(), "zero_grad must zero the bucket"
        forward_backward(ref, x[s], y[s])
        ref_tr.step(x.shape[1])
    assert tr._buckets.builds == 1
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "bucket grad_req_add")


def deferred_net(prefix):
    net = gluon.nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(gluon.nn.Dense(HIDDEN, activation="tanh"))  # in_units from the first batch
        net.add(gluon.nn.Dense(CLASSES))
    net.initialize(mx.init.Uniform(0.5 + 0.1 * hvd.rank()))
    return net


def deferred_init():
    """Trainer made before the shapes are known, net hybridized with static_shape (its
    cached graph keeps the gradient arrays of its first backward): the views are bound in
    the first forward, before that backward."""
    x, y = global_data(STEPS, B, seed=14)
    net = deferred_net("bdef_dist_")
    net.hybridize(static_alloc=True, static_shape=True)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)  # at the first forward
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("adam"),
                                gradient_as_bucket_view=True)
    assert tr._buckets.buckets == []
    forward_backward(net, shard(x, B)[0], shard(y, B)[0])
    assert len(tr._buckets.buckets) == 1 and len(tr._buckets.buckets[0].indices) == 4
    ref = deferred_net("bdef_ref_")
    ref(mx.nd.array(x[0]))
    copy_params(net, ref)  # rank 0's initial values, not yet updated
    tr.step(B)
    train(net, tr, shard(x, B)[1:], shard(y, B)[1:], STEPS - 1)
    want = reference(ref, "adam", x, y, STEPS)
    assert tr._buckets.builds == 1
    assert_close(param_arrays(net), want, 0.01, "bucket deferred init")
    assert_same_on_all_ranks(param_arrays(net), "bucket deferred init")


class Mixed(gluon.HybridBlock):
    """float32 Dense and BatchNorm (global stats: running mean/var have grad_req 'null'),
    then a float64 Dense."""

    def __init__(self, prefix):
        super(Mixed, self).__init__(prefix=prefix)
        with self.name_scope():
            self.d32 = gluon.nn.Dense(HIDDEN, activation="tanh", in_units=IN)
            self.bn = gluon.nn.BatchNorm(in_channels=HIDDEN, use_global_stats=True)
            self.d64 = gluon.nn.Dense(CLASSES, in_units=HIDDEN, dtype="float64")

    def hybrid_forward(self, F, x):
        h = self.bn(self.d32(x))
        return F.cast(self.d64(F.cast(h, "float64")), "float32")


def mixed_net(prefix):
    net = Mixed(prefix)
    net.initialize(mx.init.Uniform(0.5 + 0.1 * hvd.rank()))
    net.bn.running_mean.set_data(mx.nd.full((HIDDEN,), 0.1))
    # A frozen float32 parameter besides BatchNorm's running statistics.
    net.d32.bias.grad_req = "null"
    return net


def mixed_dtypes_and_null():
    x, y = global_data(STEPS, B, seed=15)
    net, ref = pair(mixed_net, "mix")
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"),
                                gradient_as_bucket_view=True)
    frozen = net.d32.bias.data().asnumpy()
    train(net, tr, shard(x, B), shard(y, B), STEPS)
    summary = bucket_summary(tr)
    assert sorted(d for d, _ in summary) == ["float32", "float64"], summary
    names = {tr._params[i].name for _, idx in summary for i in idx}
    assert names == {net.d32.weight.name, net.bn.gamma.name, net.bn.beta.name,
                     net.d64.weight.name, net.d64.bias.name}, names
    np.testing.assert_array_equal(net.d32.bias.data().asnumpy(), frozen)
    assert net.d64.weight.grad().dtype == np.float64
    assert_close(param_arrays(net), reference(ref, "sgd", x, y, STEPS), 0.1, "mixed")
    assert_same_on_all_ranks(param_arrays(net), "mixed")


def rebind_on_grad_req_change():
    """grad_req changed between steps on every rank, net hybridized with static_shape:
    the parameter leaves its bucket and comes back to the same view; results match."""
    x, y = global_data(6, B, seed=16)
    net, ref = pair(mlp, "rb")
    net.hybridize(static_alloc=True, static_shape=True)
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"),
                                gradient_as_bucket_view=True, bucket_cap_mb=SMALL_CAP_MB)
    ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    weight = net[0].weight
    view = weight.grad()
    # A step with the same grad_req after a change: a static graph bound to an array
    # other than the view would leave the view stale there.
    reqs = ["write", "null", "write", "write", "add", "write"]
    for s in range(6):
        for m in (net, ref):
            m[0].weight.grad_req = reqs[s]
        forward_backward(net, shard(x, B)[s], shard(y, B)[s])
        tr.step(B)
        forward_backward(ref, x[s], y[s])
        ref_tr.step(x.shape[1])
        bound = {tr._params[i] for i in tr._buckets.bound_indices}
        assert (weight in bound) == (reqs[s] != "null")
        if reqs[s] != "null":
            assert weight.grad() is view, "a parameter returns to its own place"
        if reqs[s] == "add":
            net[0].weight.zero_grad()
            ref[0].weight.zero_grad()
    assert tr._buckets.builds == 1, tr._buckets.builds
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "rebind")


def fp16_compression():
    x, y = global_data(STEPS, B, seed=17)
    net, ref = pair(mlp, "bfp16")
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"),
                                compression=hvd.Compression.fp16,
                                gradient_as_bucket_view=True, bucket_cap_mb=SMALL_CAP_MB)

    def after_step(s):
        # One float16 wire buffer per live bucket; a buffer of a bucket gone (buckets
        # rebound under new numbers: a stand-in key here) is dropped at the next step.
        live = {"%sbucket.%d" % (tr._prefix, b.number) for b in tr._buckets.buckets}
        assert set(tr._wire) == live, (sorted(tr._wire), sorted(live))
        assert all(w.buf.dtype == np.float16 for w in tr._wire.values())
        tr._wire["gone.bucket"] = mx.nd.zeros((3,), dtype="float16")
    train(net, tr, shard(x, B), shard(y, B), STEPS, after_step)
    for b in tr._buckets.buckets:
        assert b.flat.dtype == np.float32
    got, want = param_arrays(net), reference(ref, "sgd", x, y, STEPS)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-3, atol=2e-3 * 0.1)
    assert_same_on_all_ranks(got, "bucket fp16")


def groups_and_predivide():
    x, y = global_data(STEPS, B, seed=18)
    net, ref = pair(mixed_net, "bgrp")
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"), num_groups=2,
                                gradient_predivide_factor=2.0,
                                gradient_as_bucket_view=True, bucket_cap_mb=SMALL_CAP_MB)
    train(net, tr, shard(x, B), shard(y, B), STEPS)
    assert len(tr._buckets.buckets) >= 3, bucket_summary(tr)
    assert_close(param_arrays(net), reference(ref, "sgd", x, y, STEPS), 0.1, "groups")
    assert_same_on_all_ranks(param_arrays(net), "groups")


def save_load_states():
    """Adam states saved after 2 steps and loaded into a new bucketed trainer: 2 more steps
    equal 4 uninterrupted steps of one process."""
    x, y = global_data(4, B, seed=19)
    net, ref = pair(mlp, "bsave")
    kwargs = dict(gradient_as_bucket_view=True, bucket_cap_mb=SMALL_CAP_MB)
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("adam"), **kwargs)
    train(net, tr, shard(x, B)[:2], shard(y, B)[:2], 2)
    with tempfile.TemporaryDirectory() as d:
        states = os.path.join(d, "rank%d.states" % hvd.rank())
        params = os.path.join(d, "rank%d.params" % hvd.rank())
        tr.save_states(states)
        net.save_parameters(params)
        net2 = mlp("bsave_dist_")  # same prefix: the file's names match
        net2.load_parameters(params)
        tr2 = hvd.DistributedTrainer(net2.collect_params(), optimizer("adam"), **kwargs)
        tr2.load_states(states)
    train(net2, tr2, shard(x, B)[2:], shard(y, B)[2:], 2)
    assert_close(param_arrays(net2), reference(ref, "adam", x, y, 4), 0.01, "save/load")
    assert_same_on_all_ranks(param_arrays(net2), "save/load")


def layout_mismatch_error():
    """Ranks training different parameters: a ValueError on every rank, never a hang."""
    x, y = global_data(1, B, seed=20)
    net = mlp("bbad_")
    if hvd.rank() == hvd.size() - 1:
        net[1].bias.grad_req = "null"
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"),
                                gradient_as_bucket_view=True)
    forward_backward(net, shard(x, B)[0], shard(y, B)[0])
    try:
        tr.step(B)
    except ValueError as e:
        msg = str(e)
        assert "differ between ranks" in msg and "rank %d" % (hvd.size() - 1) in msg, msg
    else:
        raise AssertionError("different layouts must raise on rank %d" % hvd.rank())
    # The process stays usable.
    assert hvd.allreduce(mx.nd.ones((2,)), name="bbad.after").asnumpy().tolist() == [1, 1]


# --- gradient arrays made or replaced around autograd's recording ---------------------------

def seeded_init(seed):
    mx.random.seed(seed)  # the same values on every rank and in both runs
    return mx.init.Uniform(0.5)


def all_views(trainer):
    """Every bucketed parameter's gradient is its view."""
    b = trainer._buckets
    for bucket in b.live:
        for i, v in zip(bucket.indices, bucket.views):
            if i in b.bound_indices:
                assert trainer._params[i].grad() is v, trainer._params[i].name
    assert b.bound_indices == {i for i, p in enumerate(trainer._params)
                               if p.grad_req != "null"}, sorted(b.bound_indices)


def with_and_without_views(tag, script, opt_kind="sgd"):
    """Runs ``script(prefix, trainer_kwargs) -> (net, trainer)`` without and with bucket
    views (and with several buckets): the parameters must be the same on every rank."""
    results = {}
    for kind, kwargs in (("plain", {}), ("one", dict(gradient_as_bucket_view=True)),
                         ("many", dict(gradient_as_bucket_view=True,
                                       bucket_cap_mb=SMALL_CAP_MB))):
        net, tr = script("%s_%s_" % (tag, kind), kwargs)
        results[kind] = param_arrays(net)
        assert_same_on_all_ranks(results[kind], "%s %s" % (tag, kind))
        if kwargs:
            all_views(tr)
    assert_identical(results["one"], results["plain"], tag + ": one bucket vs plain")
    assert_identical(results["many"], results["plain"], tag + ": many buckets vs plain")
    return results["one"]


def imperative_deferred_net(prefix):
    net = gluon.nn.Sequential(prefix=prefix)  # not hybridized: layer by layer
    with net.name_scope():
        net.add(gluon.nn.Dense(HIDDEN, activation="tanh"))  # in_units from the first batch
        net.add(gluon.nn.Dense(HIDDEN, activation="tanh"))
        net.add(gluon.nn.Dense(CLASSES))
    net.initialize(mx.init.Uniform(0.5 + 0.1 * hvd.rank()))
    return net


def deferred_imperative():
    """The tester's case: a plain Sequential with deferred initialization; the first
    forward records the first layers before the last one is initialized (their gradients
    are bound at the first step, after being copied into the views). SGD and Adam, grad_req
    'write' and 'add' (two backward passes a step), and a first forward and backward whose
    gradients are overwritten before the first step: the same as without views and as one
    process on the concatenated batch."""
    x, y = global_data(STEPS + 1, B, seed=21)
    for opt_kind, req, dry in (("sgd", "write", False), ("adam", "add", False),
                               ("sgd", "write", True)):
        results = {}
        for kind, kwargs in (("plain", {}), ("one", dict(gradient_as_bucket_view=True)),
                             ("many", dict(gradient_as_bucket_view=True,
                                           bucket_cap_mb=SMALL_CAP_MB))):
            name = "bimp_%s_%s_%s%s" % (opt_kind, req, kind, "_dry" if dry else "")
            net = imperative_deferred_net(name + "_dist_")
            hvd.broadcast_parameters(net.collect_params(), root_rank=0)  # in the forward
            net.collect_params().setattr("grad_req", req)
            tr = hvd.DistributedTrainer(net.collect_params(), optimizer(opt_kind), **kwargs)
            xs, ys = shard(x, B), shard(y, B)
            ref = imperative_deferred_net(name + "_ref_")
            ref(mx.nd.array(x[0]))
            mx.random.seed(31)  # the same initial values in the three runs
            if dry:  # gradients overwritten by the next backward (grad_req 'write')
                forward_backward(net, xs[STEPS], ys[STEPS])
            for s in range(STEPS):
                forward_backward(net, xs[s], ys[s])
                if req == "add":
                    forward_backward(net, xs[s], ys[s])
                if s == 0:
                    copy_params(net, ref)  # rank 0's initial values, not yet updated
                tr.step(B)
                if req == "add":
                    net.collect_params().zero_grad()
                if kwargs:
                    all_views(tr)
                    assert tr._buckets.builds == 1, tr._buckets.builds
            got = param_arrays(net)
            assert_same_on_all_ranks(got, name)
            results[kind] = got
            # 'add' doubles every gradient: the reference trains on the batch twice.
            ref.collect_params().setattr("grad_req", req)
            ref_tr = gluon.Trainer(ref.collect_params(), optimizer(opt_kind), kvstore=None)
            for s in range(STEPS):
                forward_backward(ref, x[s], y[s])
                if req == "add":
                    forward_backward(ref, x[s], y[s])
                ref_tr.step(x.shape[1])
                if req == "add":
                    ref.collect_params().zero_grad()
            assert_close(got, param_arrays(ref), 0.1, name)
            if kind == "one":
                assert len(tr._buckets.buckets) == 1, bucket_summary(tr)
        assert_identical(results["one"], results["plain"], "imperative deferred: one")
        assert_identical(results["many"], results["plain"], "imperative deferred: many")


class SharedLazy(gluon.Block):
    """Imperative: a Dense used before and after a deferred one (one parameter recorded
    twice around the deferred initialization), and a parameter whose shape is only set in
    the first forward."""

    def __init__(self, prefix):
        super(SharedLazy, self).__init__(prefix=prefix)
        with self.name_scope():
            self.a = gluon.nn.Dense(HIDDEN, activation="tanh", in_units=IN)
            self.mid = gluon.nn.Dense(IN, activation="tanh")
            self.out = gluon.nn.Dense(CLASSES)
            self.scale = self.params.get("scale", shape=(0,), init=mx.init.One(),
                                         allow_deferred_init=True)

    def forward(self, x):
        h = self.a(self.mid(self.a(x)))
        if self.scale._data is None:
            self.scale.shape = (h.shape[1],)
            self.scale._finish_deferred_init()
        return self.out(h * self.scale.data())


def shared_and_shape_in_forward():
    x, y = global_data(STEPS, B, seed=22)

    def script(prefix, kwargs):
        net = SharedLazy(prefix)
        net.initialize(seeded_init(5))
        tr = hvd.DistributedTrainer(net.collect_params(), optimizer("adam"), **kwargs)
        train(net, tr, shard(x, B), shard(y, B), STEPS)
        return net, tr
    with_and_without_views("bshared", script, "adam")


def static_children_deferred():
    """Sequential.hybridize(static_shape=True): each Dense is its own static cached graph,
    which keeps the gradient arrays of its first backward; the first ones take their data
    before the last one is initialized: they are laid out and bound right then."""
    x, y = global_data(STEPS, B, seed=23)

    def script(prefix, kwargs):
        net = gluon.nn.Sequential(prefix=prefix)
        with net.name_scope():
            net.add(gluon.nn.Dense(HIDDEN, activation="tanh"), gluon.nn.Dense(CLASSES))
        net.initialize(seeded_init(6))
        net.hybridize(static_alloc=True, static_shape=True)
        tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"), **kwargs)
        train(net, tr, shard(x, B), shard(y, B), STEPS)
        return net, tr
    with_and_without_views("bstatkids", script)


def initialized_in_parts():
    """Blocks initialized one by one, the first with known shapes (so its gradients exist
    when the trainer is made), the others deferred: the first is recorded in the first
    forward before the others are initialized, and is bound at the first step."""
    x, y = global_data(STEPS, B, seed=24)

    def script(prefix, kwargs):
        net = gluon.nn.Sequential(prefix=prefix)
        with net.name_scope():
            net.add(gluon.nn.Dense(HIDDEN, activation="tanh", in_units=IN),
                    gluon.nn.Dense(HIDDEN, activation="tanh"), gluon.nn.Dense(CLASSES))
        init = seeded_init(7)
        for block in net:
            block.initialize(init)
        tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"), **kwargs)
        if kwargs:
            assert tr._buckets.buckets == []  # waits for the deferred layers
        train(net, tr, shard(x, B), shard(y, B), STEPS)
        return net, tr
    with_and_without_views("bparts", script)


def reinit_reset_ctx_cast():
    """New gradient arrays inside autograd.record() before the forward (force_reinit) and
    between steps (reset_ctx, cast to float64), each followed by two steps or more;
    imperative and static_shape hybridized."""
    x, y = global_data(6, B, seed=25)

    def script(prefix, kwargs, hybrid=False):
        net = gluon.nn.HybridSequential(prefix=prefix)
        with net.name_scope():
            net.add(gluon.nn.Dense(HIDDEN, activation="tanh", in_units=IN),
                    gluon.nn.Dense(CLASSES, in_units=HIDDEN))
        net.initialize(seeded_init(8))
        if hybrid:
            net.hybridize(static_alloc=True, static_shape=True)
        # No optimizer state: MXNet keeps float32 momentum after cast.
        tr = hvd.DistributedTrainer(net.collect_params(),
                                    mx.optimizer.SGD(learning_rate=0.1, wd=1e-3), **kwargs)
        xs, ys = shard(x, B), shard(y, B)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        dtype = "float32"
        for s in range(6):
            with autograd.record():
                if s == 1:
                    net.initialize(seeded_init(9), force_reinit=True)
                out = net(mx.nd.array(xs[s], dtype=dtype))
                loss = loss_fn(out, mx.nd.array(ys[s], dtype=dtype))
            loss.backward()
            tr.step(B)
            if kwargs:
                all_views(tr)
            if s == 2:
                net.collect_params().reset_ctx(mx.cpu(0))
            if s == 3:  # a cast graph: bound before its first backward
                net.cast("float64")
                dtype = "float64"
        return net, tr
    with_and_without_views("breinit", script)
    # Hybridized with static_shape=True, a plain Trainer goes wrong here (the cached graph
    # keeps writing the gradient arrays that force_reinit and reset_ctx replaced); with
    # views it trains like the imperative net.
    want, _ = script("breinit_imp_", {})
    want = param_arrays(want)
    for kwargs in (dict(gradient_as_bucket_view=True),
                   dict(gradient_as_bucket_view=True, bucket_cap_mb=SMALL_CAP_MB)):
        net, _ = script("breinit_hyb_", kwargs, hybrid=True)
        got = param_arrays(net)
        assert_same_on_all_ranks(got, "breinit hybridized")
        assert_identical(got, want, "breinit hybridized with views vs imperative plain")

SCENARIOS = {
    "equivalence_sgd": lambda: equivalence("sgd"),
    "equivalence_adam_hybrid_static": lambda: equivalence("adam", hybridize=True),
}
SCENARIOS.update({f.__name__: f for f in (
    allreduce_grads_reads_mean, grad_req_add, deferred_init, mixed_dtypes_and_null,
    rebind_on_grad_req_change, fp16_compression, groups_and_predivide, save_load_states,
    layout_mismatch_error, deferred_imperative, shared_and_shape_in_forward,
    static_children_deferred, initialized_in_parts, reinit_reset_ctx_cast)})


if __name__ == "__main__":
    run_scenarios(SCENARIOS, list(SCENARIOS))
