"""broadcast_parameters of Gluon parameters deferred on some ranks only, under the engine in
MXNET_ENGINE_TYPE (the threaded default, or NaiveEngine).

Rank 0 loaded a checkpoint (its parameters are initialized) while the others wait for the
first forward to know their shapes, or the other way round, or each rank defers different
layers. Under NaiveEngine every collective completes inside its call, so the ranks used to
broadcast in different orders and wait for each other forever (rank 0 at the call in key
order, the others in the forward); now every rank broadcasts those parameters in the first
forward. Every rank checks the values it ends with against values it computes itself.
"""
import os
import tempfile

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon.parameter import DeferredInitializationError

import mxhorovod as hvd
from training_common import (CLASSES, HIDDEN, IN, assert_close, assert_same_on_all_ranks,
                          global_data, run_scenarios, shard)

NAIVE = os.environ.get("MXNET_ENGINE_TYPE") == "NaiveEngine"
CTXS = [mx.cpu(0), mx.cpu(1)]  # two copies of every parameter: each must get the values


def net_with(prefix, in0=0, in1=0):
    """Dense(5)-relu-Dense(2); an in_units of 0 leaves that layer's weight deferred. The
    biases take the initializer given to initialize() (not zeros), as the weights."""
    net = gluon.nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(gluon.nn.Dense(5, activation="relu", in_units=in0, bias_initializer=None))
        net.add(gluon.nn.Dense(2, in_units=in1, bias_initializer=None))
    return net


def checkpoint_values(net):
    """Values every rank can compute: the checkpoint rank 0 loads."""
    return {k: np.random.RandomState(i).uniform(-1, 1, p.shape).astype(np.float32)
            for i, (k, p) in enumerate(sorted(net.collect_params().items()))}


def load_checkpoint(net, prefix, ctx):
    """On this rank: save the checkpoint values from a net of known shapes, load them into
    ``net`` (as a script resuming from a file does). Returns the expected values."""
    src = net_with(prefix, 7, 5)
    want = checkpoint_values(src)
    src.initialize()
    for k, p in src.collect_params().items():
        p.set_data(mx.nd.array(want[k]))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.params")
        src.save_parameters(path)
        net.load_parameters(path, ctx=ctx)
    return want


def assert_values(net, want, what):
    """Every copy of every parameter holds ``want`` (by key), exactly, on this rank."""
    for k, p in sorted(net.collect_params().items()):
        for arr in p.list_data():
            np.testing.assert_array_equal(arr.asnumpy(), want[k], err_msg="%s: %s on rank %d"
                                          % (what, k, hvd.rank()))


def assert_deferred(param, deferred, what):
    """Taking ``param``'s data raises DeferredInitializationError if ``deferred``, else
    works (not waiting for it: with the threaded engine the broadcast of a weight that is
    deferred on the peers completes in their forward)."""
    try:
        param.data(CTXS[0])
    except DeferredInitializationError:
        assert deferred, "%s: %s deferred on rank %d" % (what, param.name, hvd.rank())
    else:
        assert not deferred, "%s: %s readable on rank %d" % (what, param.name, hvd.rank())


def checkpoint_on_rank_0(hybridize):
    """Rank 0 loaded a checkpoint, the others initialized with deferred shapes."""
    prefix = "ckpt%d_" % hybridize
    net = net_with(prefix)
    if hvd.rank() == 0:
        want = load_checkpoint(net, prefix, CTXS)
        kept = net[0].weight.list_data()
    else:
        net.initialize(mx.init.Uniform(1.0 + hvd.rank()), ctx=CTXS)
        want = checkpoint_values(net_with(prefix, 7, 5))
    if hybridize:
        net.hybridize()
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    # Under NaiveEngine the weights deferred elsewhere wait for the forward on rank 0 too.
    assert_deferred(net[0].weight, hvd.rank() != 0 or NAIVE, "after the call")
    assert_deferred(net[0].bias, False, "after the call")
    # A collective between the call and the forward meets the peers' (program order).
    assert hvd.broadcast_object(hvd.rank() + 40, root_rank=0) == 40
    if NAIVE:
        # Given a value meanwhile, rank 0 broadcasts that value in the forward.
        want[prefix + "dense1_weight"] = want[prefix + "dense1_weight"] * 2
        if hvd.rank() == 0:
            net[1].weight.set_data(mx.nd.array(want[prefix + "dense1_weight"]))
    out = net(mx.nd.ones((3, 7), ctx=CTXS[0]))
    assert_values(net, want, "checkpoint")
    if hvd.rank() == 0:  # the same arrays as before: references kept to them stay valid
        assert all(a is b for a, b in zip(net[0].weight.list_data(), kept))
    assert_same_on_all_ranks([out.asnumpy()], "ckpt_out%d" % hybridize)
    for p in net.collect_params().values():
        assert "_init_impl" not in vars(p), p.name  # no hook left behind


def checkpoint_plain():
    checkpoint_on_rank_0(False)


def checkpoint_hybridized():
    checkpoint_on_rank_0(True)


def root_deferred():
    """The root's weights are deferred, the other ranks' initialized: the root's win."""
    root = hvd.size() - 1
    mine = 0 if hvd.rank() == root else 7
    net = net_with("rootdef_", mine, mine and 5)
    net.initialize(mx.init.Constant(float(hvd.rank() + 1)))
    hvd.broadcast_parameters(net.collect_params(), root_rank=root)
    net(mx.nd.ones((2, 7)))
    want = {k: np.full(p.shape, root + 1.0, np.float32)
            for k, p in net.collect_params().items()}
    assert_values(net, want, "root deferred")


def different_layers_deferred():
    """Rank 0 knows the first layer's shape only, rank 1 the second's, rank 2 both."""
    r = hvd.rank()
    net = net_with("layers_", 7 if r != 1 else 0, 5 if r != 0 else 0)
    net.initialize(mx.init.Constant(float(r + 1)))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    net(mx.nd.ones((2, 7)))
    want = {k: np.ones(p.shape, np.float32) for k, p in net.collect_params().items()}
    assert_values(net, want, "different layers")


def many_layers_deferred():
    """80 parameters (the deferred flags take two 64-bit words in the ranks' exchange),
    each rank deferring a different set of weights."""
    r = hvd.rank()
    net = gluon.nn.HybridSequential(prefix="many_")
    with net.name_scope():
        for i in range(40):
            net.add(gluon.nn.Dense(3, in_units=0 if i % (r + 2) == 0 else 3,
                                   bias_initializer=None))
    net.initialize(mx.init.Constant(float(r + 1)))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    net(mx.nd.ones((2, 3)))
    want = {k: np.ones(p.shape, np.float32) for k, p in net.collect_params().items()}
    assert_values(net, want, "many layers")


def every_rank_deferred():
    """No checkpoint: every rank's weights deferred, two calls before the first forward
    (two hooks on one parameter, each broadcasting under its own names)."""
    net = net_with("alldef_")
    net.initialize(mx.init.Constant(float(hvd.rank() + 1)))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    hvd.broadcast_parameters(net.collect_params(), root_rank=hvd.size() - 1, prefix="again.")
    net(mx.nd.ones((2, 7)))
    # Rank 0's values: the second call broadcasts the values the first gave the last rank.
    want = {k: np.ones(p.shape, np.float32) for k, p in net.collect_params().items()}
    assert_values(net, want, "every rank deferred")


def changed_before_forward():
    """NaiveEngine only (with the threaded engines rank 0's broadcast has already gone):
    rank 0's weight, made deferred again, is cast or moved to two contexts before the
    forward; it gets arrays of the new dtype or contexts, with its values."""
    if not NAIVE:
        return
    r = hvd.rank()
    for change in ("cast", "reset_ctx"):
        net = net_with("changed_%s_" % change, 4 if r == 0 else 0)
        net.initialize(mx.init.Constant(float(r + 1)))
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
        dtype = "float64" if change == "cast" else "float32"
        if change == "cast":
            net.cast(dtype)
        else:
            net.collect_params().reset_ctx(CTXS)
        net(mx.nd.ones((2, 4), dtype=dtype))
        for arr in net[0].weight.list_data():
            assert arr.dtype == np.dtype(dtype), (change, arr.dtype)
            np.testing.assert_array_equal(arr.asnumpy(), np.ones((5, 4)), err_msg=change)
        assert len(net[0].weight.list_data()) == (2 if change == "reset_ctx" else 1)


def trainer_after_checkpoint(buckets):
    """The usual resume: rank 0 loads, broadcast, DistributedTrainer made before the first
    forward, a few steps; every rank equals one process trained on the whole batch."""
    steps, per, lr = 3, 4, 0.1
    x, y = global_data(steps, per, seed=5)
    prefix = "resume%d_" % buckets
    net = gluon.nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(gluon.nn.Dense(HIDDEN, activation="tanh"))
        net.add(gluon.nn.Dense(CLASSES))
    ref = gluon.nn.HybridSequential(prefix="ref" + prefix)
    with ref.name_scope():
        ref.add(gluon.nn.Dense(HIDDEN, activation="tanh", in_units=IN))
        ref.add(gluon.nn.Dense(CLASSES, in_units=HIDDEN))
    ref.initialize()
    start = [np.random.RandomState(10 + i).uniform(-0.5, 0.5, p.shape).astype(np.float32)
             for i, p in enumerate(ref.collect_params().values())]
    for p, v in zip(ref.collect_params().values(), start):
        p.set_data(mx.nd.array(v))
    if hvd.rank() == 0:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "resume.params")
            ref.save_parameters(path)
            net.load_parameters(path)
    else:
        net.initialize(mx.init.Uniform(1.0 + hvd.rank()))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": lr},
                                     gradient_as_bucket_view=buckets)
    ref_trainer = gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": lr})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    xs, ys = shard(x, per), shard(y, per)
    for s in range(steps):
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(xs[s])), mx.nd.array(ys[s]))
        loss.backward()
        trainer.step(per)
        with autograd.record():
            ref_loss = loss_fn(ref(mx.nd.array(x[s])), mx.nd.array(y[s]))
        ref_loss.backward()
        ref_trainer.step(per * hvd.size())
    got = [p.data().asnumpy() for p in net.collect_params().values()]
    assert_close(got, [p.data().asnumpy() for p in ref.collect_params().values()], lr,
                 "resumed training")
    assert_same_on_all_ranks(got, "resume%d" % buckets)


def trainer_plain():
    trainer_after_checkpoint(False)


def trainer_buckets():
    trainer_after_checkpoint(True)


SCENARIOS = {f.__name__: f for f in (
    checkpoint_plain, checkpoint_hybridized, root_deferred, different_layers_deferred,
    many_layers_deferred, every_rank_deferred, changed_before_forward, trainer_plain,
    trainer_buckets)}

if __name__ == "__main__":
    run_scenarios(SCENARIOS, list(SCENARIOS))
