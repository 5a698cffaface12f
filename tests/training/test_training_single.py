"""Training layer in one process: compression, forwarding of the optimizer wrapper,
argument errors, and the size-1 paths (no collectives needed)."""
import pickle
import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

import mxhorovod as hvd
from mxhorovod.training.optimizer import split_list


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_fp16_compression_roundtrip_float(dtype):
    x = mx.nd.array([1.0, -2.5, 1.0 / 3], dtype=dtype)
    sent, ctx = hvd.Compression.fp16.compress(x)
    assert sent.dtype == np.float16
    back = hvd.Compression.fp16.decompress(sent, ctx)
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_allclose(back.asnumpy(), x.asnumpy(), rtol=1e-3)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32", "int64"])
def test_fp16_compression_leaves_integers(dtype):
    x = mx.nd.array([1, 2, 3], dtype=dtype)
    sent, ctx = hvd.Compression.fp16.compress(x)
    assert sent is x
    assert hvd.Compression.fp16.decompress(sent, ctx) is x


def test_fp16_compression_into_reused_buffers():
    # The trainer's path: the wire buffer is reused while shape and dtype stay, the cast
    # back goes straight into the gradient; integers and float16 pass through.
    from mxhorovod.training.compression import wire_path
    compress, decompress_into = wire_path(hvd.Compression.fp16)
    buffers = {}
    g = mx.nd.array([1.0, -2.5, 1.0 / 3, 7.0])
    sent, ctx = compress(g, buffers, 3)
    assert sent.dtype == np.float16 and buffers[3].buf is sent and ctx == np.float32
    np.testing.assert_array_equal(sent.asnumpy(), g.asnumpy().astype(np.float16))
    g[:] = g * 3  # the same array again (the checks skipped): cast anew, into the same buffer
    assert compress(g, buffers, 3)[0] is sent
    np.testing.assert_allclose(sent.asnumpy(), [3.0, -7.5, 1.0, 21.0], rtol=1e-3)
    again, _ = compress(g * 2 / 3, buffers, 3)  # another array of the same shape
    assert again is sent
    np.testing.assert_allclose(again.asnumpy(), [2.0, -5.0, 2.0 / 3, 14.0], rtol=1e-3)
    other, _ = compress(mx.nd.ones((2, 3)), buffers, 3)
    assert other is not sent and other.shape == (2, 3)
    out = mx.nd.zeros((4,), dtype="float64")
    decompress_into(again, np.float64, out)
    np.testing.assert_allclose(out.asnumpy(), [2.0, -5.0, 2.0 / 3, 14.0], rtol=1e-3)
    for x in (mx.nd.array([1, 2], dtype="int32"), mx.nd.array([1, 2], dtype="float16")):
        assert compress(x, buffers, "k")[0] is x
    # A compressor with Horovod's interface only, or a subclass of fp16 overriding a
    # method: its own methods, and assignment back.
    none_compress, none_into = wire_path(hvd.Compression.none)
    none_sent, none_ctx = none_compress(g, buffers, 4)
    assert none_sent is g and 4 not in buffers
    out32 = mx.nd.zeros((4,))
    none_into(g, none_ctx, out32)
    np.testing.assert_array_equal(out32.asnumpy(), g.asnumpy())

    class Halved(hvd.Compression.fp16):
        @staticmethod
        def compress(tensor):
            return (tensor / 2).astype("float16"), tensor.dtype
    half_compress, _ = wire_path(Halved)
    np.testing.assert_allclose(half_compress(g, {}, 0)[0].asnumpy(), g.asnumpy() / 2,
                               rtol=1e-3)


def test_fp16_compression_into_numpy_arrays():
    # Under npx.set_np() the gradients are mx.np arrays: every float dtype's casts (the
    # engine operation for float32, mx.nd.cast for float64) give astype's bits, 0-d too.
    from mxhorovod.training.compression import wire_path
    compress, decompress_into = wire_path(hvd.Compression.fp16)
    mx.npx.set_np()
    try:
        for dtype in ("float32", "float64"):
            for shape in ((5,), ()):
                g = mx.np.array(np.full(shape, 1.0 / 3), dtype=dtype)
                sent, ctx = compress(g, {}, 0)
                want = g.astype("float16")
                assert sent.asnumpy().tobytes() == want.asnumpy().tobytes(), (dtype, shape)
                out = mx.np.zeros(shape, dtype=dtype)
                decompress_into(sent, ctx, out)
                assert out.asnumpy().tobytes() == want.astype(dtype).asnumpy().tobytes()
    finally:
        mx.npx.reset_np()


def test_none_compression_is_identity():
    x = mx.nd.ones((2, 3))
    sent, ctx = hvd.Compression.none.compress(x)
    assert sent is x and hvd.Compression.none.decompress(sent, ctx) is x


def test_split_list():
    assert split_list(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_list([1, 2], 5) == [[1], [2]]
    assert split_list(list(range(4)), 1) == [[0, 1, 2, 3]]


def test_optimizer_forwards_reads_and_writes():
    inner = mx.optimizer.SGD(learning_rate=0.5, momentum=0.9)
    opt = hvd.DistributedOptimizer(inner)
    assert isinstance(opt, mx.optimizer.Optimizer)
    assert opt.learning_rate == 0.5 and opt.momentum == 0.9
    opt.set_learning_rate(0.25)
    assert inner.learning_rate == 0.25
    # What Trainer and Module set on the optimizer they are given lands on the wrapped one.
    opt.param_dict = {0: "p"}
    opt.idx2name = {0: "fc_weight"}
    opt.rescale_grad = 0.125
    opt.set_lr_mult({"fc_weight": 0.5})
    opt.set_wd_mult({"fc_weight": 2.0})
    assert inner.param_dict == {0: "p"} and inner.idx2name == {0: "fc_weight"}
    assert inner.rescale_grad == 0.125
    assert inner.lr_mult == {"fc_weight": 0.5} and inner.wd_mult["fc_weight"] == 2.0
    assert "param_dict" not in vars(opt)


def test_optimizer_pickles_like_updater_states():
    opt = hvd.DistributedOptimizer(mx.optimizer.Adam(learning_rate=0.01), num_groups=2)
    opt.param_dict = {0: "p"}
    back = pickle.loads(pickle.dumps(opt))
    assert isinstance(back, hvd.DistributedOptimizer)
    assert back._prefix == opt._prefix and back._num_groups == 2
    assert back.learning_rate == 0.01 and back.param_dict == {}


def test_optimizer_pickled_with_a_set_id_of_another_session_forgets_it():
    # A pickle made before ProcessSet pickled as its ranks carries the set's id; loaded
    # where no set with those ranks is registered, the wrapper holds an unregistered set
    # (its collectives raise 'not registered') instead of whichever set has that id now.
    stale = hvd.ProcessSet([0])
    stale.process_set_id = 5
    opt = hvd.DistributedOptimizer.__new__(hvd.DistributedOptimizer)
    opt.__setstate__({"_optimizer": mx.optimizer.SGD(), "_process_set": stale,
                      "_gradient_predivide_factor": 1.0, "_num_groups": 0, "_prefix": None,
                      "_device_id": 0})
    assert opt._process_set.process_set_id is None and opt._process_set.ranks == [0]
    back = pickle.loads(pickle.dumps(hvd.DistributedOptimizer(mx.optimizer.SGD())))
    assert back._process_set is hvd.global_process_set


def test_optimizer_rejects_non_optimizers():
    with pytest.raises(TypeError):
        hvd.DistributedOptimizer("sgd")
    with pytest.raises(TypeError):
        hvd.DistributedOptimizer(hvd.DistributedOptimizer(mx.optimizer.SGD()))


def _net():
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize(mx.init.One())
    return net


def _one_step(trainer, net):
    with autograd.record():
        loss = net(mx.nd.ones((4, 3))).sum()
    loss.backward()
    trainer.step(4)
    return net.weight.data().asnumpy()


def test_size_one_matches_plain_training(hvd_single):
    ref = _net()
    want = _one_step(gluon.Trainer(ref.collect_params(), "sgd",
                                   {"learning_rate": 0.1, "wd": 0.01}), ref)
    for make in (lambda p: hvd.DistributedTrainer(p, "sgd", {"learning_rate": 0.1, "wd": 0.01}),
                 lambda p: gluon.Trainer(p, hvd.DistributedOptimizer(
                     mx.optimizer.SGD(learning_rate=0.1, wd=0.01)))):
        net = _net()
        np.testing.assert_allclose(_one_step(make(net.collect_params()), net), want, rtol=1e-6)


def test_trainer_argument_errors(hvd_single):
    net = _net()
    trainer = gluon.Trainer(net.collect_params(), "sgd")
    with pytest.raises(TypeError, match="Trainer"):
        hvd.DistributedTrainer(net.collect_params(), trainer)
    with pytest.raises(TypeError):
        hvd.DistributedTrainer(net.collect_params(), 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tr = hvd.DistributedTrainer(net.collect_params(),
                                    hvd.DistributedOptimizer(mx.optimizer.SGD()))
    assert any("unwrapped" in str(w.message) for w in caught)
    assert type(tr._optimizer) is mx.optimizer.SGD


def test_objects_size_one(hvd_single):
    assert hvd.broadcast_object({"a": 1}) == {"a": 1}
    assert hvd.allgather_object([1, "x"]) == [[1, "x"]]
