"""Contiguous gradient buckets in one process: the layout plan (no MXNet needed), that
backward really writes into the views, and DistributedTrainer(gradient_as_bucket_view=True)
on one rank against a plain gluon.Trainer."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

import mxhorovod as hvd
from mxhorovod.training.buckets import ALIGN_BYTES, GradientBuckets, plan_buckets


# --- plan_buckets: pure logic -------------------------------------------------------------

def test_plan_fills_in_order_up_to_the_cap():
    items = [("a", "f32", 64), ("b", "f32", 64), ("c", "f32", 64), ("d", "f32", 64)]
    assert plan_buckets(items, 128) == [["a", "b"], ["c", "d"]]
    assert plan_buckets(items, 127) == [["a"], ["b"], ["c"], ["d"]]
    assert plan_buckets(items, 10**9) == [["a", "b", "c", "d"]]


def test_plan_counts_alignment_and_isolates_large_items():
    # 1 byte takes a whole 64-byte slot; a 1000-byte item larger than the cap goes alone.
    items = [("a", "f32", 1), ("b", "f32", 1000), ("c", "f32", 1), ("d", "f32", 1)]
    assert ALIGN_BYTES == 64
    assert plan_buckets(items, 128) == [["a"], ["b"], ["c", "d"]]
    assert plan_buckets(items, 0) == [["a"], ["b"], ["c"], ["d"]]


def test_plan_groups_by_dtype_and_orders_by_first_member():
    items = [("a", "f32", 64), ("b", "f64", 64), ("c", "f32", 64), ("d", "f64", 64),
             ("e", "f32", 64)]
    assert plan_buckets(items, 128) == [["a", "c"], ["b", "d"], ["e"]]


def test_plan_rejects_bad_input():
    with pytest.raises(ValueError, match="cap"):
        plan_buckets([("a", "f32", 4)], -1)
    with pytest.raises(ValueError, match="'a'"):
        plan_buckets([("a", "f32", 0)], 100)


# --- views: backward writes into the buckets ---------------------------------------------

def conv_net():
    """64-channel 3x3 convolution (MKLDNN's own layouts, DESIGN.md), BatchNorm (running
    statistics with grad_req 'null'), Dense."""
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(64, 3, padding=1, in_channels=3),
            gluon.nn.BatchNorm(in_channels=64), gluon.nn.Activation("relu"),
            gluon.nn.Flatten(), gluon.nn.Dense(5, in_units=64 * 6 * 6))
    net.initialize(mx.init.Xavier())
    return net


def twin(make):
    mx.random.seed(3)
    a, b = make(), make()
    for pa, pb in zip(a.collect_params().values(), b.collect_params().values()):
        pb.set_data(pa.data())
    return a, b


def backward(net, x):
    with autograd.record():
        loss = (net(x) ** 2).sum()
    loss.backward()


@pytest.mark.parametrize("hybrid", [None, "dynamic", "static"])
def test_backward_writes_into_the_flat_buffers(hybrid):
    net, ref = twin(conv_net)
    if hybrid:
        for n in (net, ref):
            n.hybridize(static_alloc=hybrid == "static", static_shape=hybrid == "static")
    params = list(net.collect_params().values())
    buckets = GradientBuckets(params, list(range(len(params))), 40000)
    assert buckets.builds == 1 and len(buckets.buckets) >= 2
    x = mx.nd.random.uniform(shape=(2, 3, 6, 6))
    for _ in range(2):
        backward(net, x)
        backward(ref, x)
        # The nets differ only by their automatic prefixes: parameter i matches.
        want = {i: p.grad().asnumpy() for i, p in enumerate(ref.collect_params().values())
                if p.grad_req != "null"}
        seen = set()
        for b in buckets.buckets:
            flat = b.flat.asnumpy()
            for i, off in zip(b.indices, b.offsets):
                w = want[i]
                np.testing.assert_allclose(flat[off:off + w.size].reshape(w.shape), w,
                                           rtol=1e-5, atol=1e-6, err_msg=params[i].name)
                seen.add(i)
        assert seen == set(want), "every trainable gradient is in a bucket"
        x = x * 1.5


def test_views_follow_backward_order_and_skip_null():
    net = conv_net()
    params = list(net.collect_params().values())
    buckets = GradientBuckets(params, list(range(len(params))), 10**9)
    (b,) = buckets.buckets
    names = [params[i].name for i in b.indices]
    assert names[0].startswith("dense") and names[0].endswith("_bias"), names
    assert names[-1].startswith("conv") and names[-1].endswith("_weight"), names
    assert not any("running" in n for n in names)
    for i, view, off in zip(b.indices, b.views, b.offsets):
        assert params[i].grad() is view
        assert off * 4 % ALIGN_BYTES == 0


# --- DistributedTrainer on one rank -------------------------------------------------------

def train(net, trainer, steps, seed=4, add=False):
    rng = np.random.RandomState(seed)
    dtype = next(iter(net.collect_params().values())).dtype
    for _ in range(steps):
        x = mx.nd.array(rng.rand(2, 3, 6, 6), dtype=dtype)
        backward(net, x)
        if add:
            backward(net, x * 0.5)
        trainer.step(2)
        if add:
            net.collect_params().zero_grad()
    return [p.data().asnumpy() for p in net.collect_params().values()]


def opt():
    return mx.optimizer.SGD(learning_rate=0.01, momentum=0.9, wd=1e-3)


@pytest.mark.parametrize("add", [False, True])
def test_size_one_trainer_matches_plain(hvd_single, add):
    net, ref = twin(conv_net)
    if add:
        for n in (net, ref):
            n.collect_params().setattr("grad_req", "add")
    tr = hvd.DistributedTrainer(net.collect_params(), opt(), gradient_as_bucket_view=True,
                                bucket_cap_mb=0.05)
    assert len(tr._buckets.buckets) >= 2
    got = train(net, tr, 3, add=add)
    want = train(ref, gluon.Trainer(ref.collect_params(), opt(), kvstore=None), 3, add=add)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)
    if add:
        for b in tr._buckets.buckets:
            assert not b.flat.asnumpy().any(), "zero_grad zeroes the views"


def test_stale_gradient_check_still_works(hvd_single):
    net = conv_net()
    tr = hvd.DistributedTrainer(net.collect_params(), opt(), gradient_as_bucket_view=True)
    backward(net, mx.nd.ones((1, 3, 6, 6)))
    tr.step(1)  # binding kept backward's fresh-gradient flags: no stale warning
    with pytest.raises(UserWarning, match="has not been updated by backward"):
        tr.step(1)


def test_cast_moves_gradients_to_new_buckets(hvd_single):
    net, ref = twin(conv_net)
    tr = hvd.DistributedTrainer(net.collect_params(), opt(), gradient_as_bucket_view=True)
    assert {b.dtype.name for b in tr._buckets.live} == {"float32"}
    first = len(tr._buckets.buckets)
    for n in (net, ref):  # new float64 gradient arrays, after the binding
        n.cast("float64")
    got = train(net, tr, 2, seed=5)
    want = train(ref, gluon.Trainer(ref.collect_params(), opt(), kvstore=None), 2, seed=5)
    assert tr._buckets.builds == 2
    assert {b.dtype.name for b in tr._buckets.live} == {"float64"}
    # The float32 buffers hold no slot any more: dropped; new numbers, so new names.
    assert tr._buckets.buckets == tr._buckets.live
    assert min(b.number for b in tr._buckets.buckets) == first
    assert net[0].weight.grad().dtype == np.float64
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("req", ["write", "add"])
def test_static_graph_bound_before_the_trainer_is_an_error(hvd_single, req):
    """A static_shape block that ran backward before the trainer keeps writing the old
    gradient arrays: the step raises instead of training on stale buckets; hybridizing
    again fixes it. With grad_req='add' the former arrays hold zeros (backward adds into
    them: NaN would hide that)."""
    net, ref = twin(conv_net)
    for n in (net, ref):
        n.hybridize(static_alloc=True, static_shape=True)
        if req == "add":
            n.collect_params().setattr("grad_req", "add")
    x = mx.nd.ones((2, 3, 6, 6))
    backward(net, x)
    old = net[0].weight.grad()
    tr = hvd.DistributedTrainer(net.collect_params(), opt(), gradient_as_bucket_view=True)
    if req == "write":
        assert np.isnan(old.asnumpy()).all(), "a former gradient array holds NaN"
    else:
        assert not old.asnumpy().any(), "a former 'add' gradient array holds zeros"
        net.collect_params().zero_grad()
    for _ in range(2):  # raises again while the old cached graph is in use
        backward(net, x)
        with pytest.raises(RuntimeError, match="static_shape=True"):
            tr.step(2)
    net.hybridize(static_alloc=True, static_shape=True)
    # No update happened; the extra forwards moved BatchNorm's running statistics.
    for pn, pr in zip(net.collect_params().values(), ref.collect_params().values()):
        pr.set_data(pn.data())
    net.collect_params().zero_grad()
    ref.collect_params().zero_grad()
    rtr = gluon.Trainer(ref.collect_params(), opt(), kvstore=None)
    got = train(net, tr, 2, add=req == "add")
    want = train(ref, rtr, 2, add=req == "add")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)


def test_mx_np_arrays(hvd_single):
    from mxnet import npx
    npx.set_np()
    try:
        net, ref = twin(lambda: _np_dense())
        tr = hvd.DistributedTrainer(net.collect_params(), opt(), gradient_as_bucket_view=True)
        rtr = gluon.Trainer(ref.collect_params(), opt(), kvstore=None)
        x = mx.np.array(np.random.RandomState(6).rand(2, 4), dtype="float32")
        for n, t in ((net, tr), (ref, rtr)):
            for _ in range(2):
                with autograd.record():
                    loss = (n(x) ** 2).sum()
                loss.backward()
                t.step(2)
        assert isinstance(net.weight.grad(), mx.np.ndarray)
        np.testing.assert_allclose(net.weight.data().asnumpy(), ref.weight.data().asnumpy(),
                                   rtol=1e-6)
    finally:
        npx.reset_np()


def _np_dense():
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Uniform(0.5))
    return net


def test_newer_trainer_takes_the_buckets_over(hvd_single):
    net = conv_net()
    old = hvd.DistributedTrainer(net.collect_params(), opt(), gradient_as_bucket_view=True)
    new = hvd.DistributedTrainer(net.collect_params(), opt(), gradient_as_bucket_view=True)
    backward(net, mx.nd.ones((1, 3, 6, 6)))
    new.step(1)
    with pytest.raises(ValueError, match="newer DistributedTrainer"):
        old.step(1)


def test_argument_errors(hvd_single):
    net = conv_net()
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        hvd.DistributedTrainer(net.collect_params(), opt(), gradient_as_bucket_view=True,
                               bucket_cap_mb=-1)
    with pytest.raises(TypeError):  # keyword only, so a Horovod positional call is intact
        hvd.DistributedTrainer(net.collect_params(), opt(), None, hvd.Compression.none,
                               1.0, None, 0, True)
