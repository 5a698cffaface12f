"""kvstore 'horovod' on its own: pushpull sums over devices and ranks, broadcast sends rank
0's values, errors name the key. Every value is checked against numpy on every rank."""
import time

import numpy as np
import mxnet as mx
from mxnet.base import MXNetError

import mxhorovod as hvd


def expect(exc, fn, *words):
    try:
        fn()
    except exc as e:
        for w in words:
            assert w in str(e), "%r not in %s: %s" % (w, exc.__name__, e)
        return
    raise AssertionError("no %s raised" % exc.__name__)


def main():
    # Creating the kvstore starts mxhorovod: no hvd.init() here on purpose.
    kv = mx.kv.create("horovod")
    assert type(kv).__name__ == "Horovod" and kv.type == "horovod"
    assert hvd.is_initialized()
    r, n = kv.rank, kv.num_workers
    assert (r, n) == (hvd.rank(), hvd.size()) and kv.local_rank == hvd.local_rank()
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    ranks_sum = n * (n + 1) / 2  # sum over ranks of (rank + 1)

    # One array, int key, in place: the sum over ranks.
    a = mx.nd.array(base * (r + 1))
    kv.pushpull(0, a)
    np.testing.assert_allclose(a.asnumpy(), base * ranks_sum)

    # str key with out: value unchanged, out holds the sum; out given as a list.
    v = mx.nd.array(base * (r + 1))
    outs = [mx.nd.zeros((2, 3)), mx.nd.zeros((2, 3))]
    kv.pushpull("fc_weight", v, out=outs)
    np.testing.assert_allclose(v.asnumpy(), base * (r + 1))
    for o in outs:
        np.testing.assert_allclose(o.asnumpy(), base * ranks_sum)

    # Several devices per rank: summed locally, then over ranks, written to every device.
    dev = [mx.nd.array(base * (r + 1), ctx=mx.cpu(0)), mx.nd.array(base * 10 * (r + 1), ctx=mx.cpu(1))]
    kv.pushpull(5, dev)
    for d in dev:
        np.testing.assert_allclose(d.asnumpy(), base * 11 * ranks_sum)
    dev = [mx.nd.array(base * (r + 1), ctx=mx.cpu(0)), mx.nd.array(base * (r + 1), ctx=mx.cpu(1))]
    out = [mx.nd.zeros((2, 3), ctx=mx.cpu(0)), mx.nd.zeros((2, 3), ctx=mx.cpu(1))]
    kv.pushpull(6, dev, out=out)
    for d, o in zip(dev, out):
        np.testing.assert_allclose(d.asnumpy(), base * (r + 1))
        np.testing.assert_allclose(o.asnumpy(), base * 2 * ranks_sum)

    # A list of keys, mixing one array and per-device lists; other dtypes; numpy int key.
    x = mx.nd.array([r + 1, 2 * (r + 1)], dtype="int32")
    y = [mx.nd.array([r], dtype="float64", ctx=mx.cpu(0)), mx.nd.array([1], dtype="float64", ctx=mx.cpu(1))]
    z = mx.nd.array([[r * 3]], dtype="int64")
    kv.pushpull([7, 8, np.int64(9)], [x, y, z])
    np.testing.assert_array_equal(x.asnumpy(), np.array([ranks_sum, 2 * ranks_sum], np.int32))
    assert x.dtype == np.int32
    for d in y:
        np.testing.assert_allclose(d.asnumpy(), [n * (n - 1) / 2 + n])
    np.testing.assert_array_equal(z.asnumpy(), [[3 * n * (n - 1) // 2]])
    po, qo = mx.nd.zeros((3,)), [mx.nd.zeros((2,)), mx.nd.zeros((2,), ctx=mx.cpu(1))]
    kv.pushpull(["p", "q"], [mx.nd.ones((3,)) * r, mx.nd.ones((2,))], out=[po, qo])
    np.testing.assert_allclose(po.asnumpy(), [n * (n - 1) / 2] * 3)
    for o in qo:
        np.testing.assert_allclose(o.asnumpy(), [n, n])

    # broadcast: rank 0's value; value untouched unless it is in out; in place when it is.
    val = mx.nd.array(base + 100 * r)
    outs = [mx.nd.zeros((2, 3)), mx.nd.zeros((2, 3), ctx=mx.cpu(1))]
    kv.broadcast("b", val, out=outs)
    np.testing.assert_allclose(val.asnumpy(), base + 100 * r)
    for o in outs:
        np.testing.assert_allclose(o.asnumpy(), base)
    val = mx.nd.array(base + 100 * r)
    other = mx.nd.zeros((2, 3), ctx=mx.cpu(1))
    kv.broadcast(11, val, out=[val, other])  # as gluon.Trainer._init_params calls it
    np.testing.assert_allclose(val.asnumpy(), base)
    np.testing.assert_allclose(other.asnumpy(), base)
    p, q = mx.nd.ones((2,)) * r, mx.nd.ones((1,), dtype="int32") * (r + 7)
    po, qo = mx.nd.zeros((2,)), mx.nd.zeros((1,), dtype="int32")
    kv.broadcast([12, 13], [p, q], out=[po, [qo]])
    np.testing.assert_allclose(po.asnumpy(), [0, 0])
    np.testing.assert_array_equal(qo.asnumpy(), [7])

    # Two kvstores use the same keys at once: their collectives never share a name.
    kv2 = mx.kv.create("horovod")
    a1, a2 = mx.nd.ones((4,)) * (r + 1), mx.nd.ones((4,)) * 2 * (r + 1)
    kv.pushpull(0, a1)
    kv2.pushpull(0, a2)
    np.testing.assert_allclose(a1.asnumpy(), [ranks_sum] * 4)
    np.testing.assert_allclose(a2.asnumpy(), [2 * ranks_sum] * 4)

    # Bad input: a clear error at the call, naming the key.
    expect(TypeError, lambda: kv.pushpull(1.5, mx.nd.ones((2,))), "key must be an int or a str", "1.5")
    expect(TypeError, lambda: kv.pushpull(True, mx.nd.ones((2,))), "key must be an int or a str")
    expect(TypeError, lambda: kv.pushpull(1, np.ones(2)), "must be NDArrays", "ndarray")
    expect(ValueError, lambda: kv.pushpull([1, 2], [mx.nd.ones((2,))]), "2 keys but 1 values")
    expect(ValueError, lambda: kv.pushpull([1, 2], [mx.nd.ones((2,))] * 2, out=[mx.nd.ones((2,))]),
           "2 keys but 1 outs")
    expect(ValueError, lambda: kv.pushpull("w", [mx.nd.ones((2,)), mx.nd.ones((3,), ctx=mx.cpu(1))]),
           "'w'", "devices differ", "(2,)", "(3,)")
    expect(ValueError, lambda: kv.pushpull("w", [mx.nd.ones((2,)), mx.nd.ones((2,), dtype="int32")]),
           "float32", "int32")
    expect(ValueError, lambda: kv.pushpull(3, mx.nd.ones((2,)), out=mx.nd.ones((3,))), "out has shape (3,)")
    expect(ValueError, lambda: kv.pushpull(3, mx.nd.ones((2,)), out=mx.nd.ones((2,), dtype="int32")),
           "dtype int32", "dtype float32")
    # A bad entry anywhere in a list: nothing sent (the good first key is not left in flight).
    first = mx.nd.ones((2,))
    expect(TypeError, lambda: kv.pushpull([20, 2.5], [first, mx.nd.ones((2,))]), "2.5")
    expect(ValueError, lambda: kv.broadcast([21, 22], [first, [first, first]], out=[first, first]),
           "one NDArray")
    kv.pushpull(20, first)
    np.testing.assert_allclose(first.asnumpy(), [n, n])
    expect(ValueError, lambda: kv.pushpull(3, []), "empty list")
    expect(ValueError, lambda: kv.broadcast(3, [mx.nd.ones((2,))] * 2, out=mx.nd.ones((2,))),
           "one NDArray")
    expect(ValueError, lambda: kv.broadcast(3, mx.nd.ones((2,)), out=mx.nd.ones((4,))), "out has shape")
    expect(ValueError, lambda: kv.pushpull(3, mx.nd.ones((2,)).tostype("row_sparse")), "row_sparse")
    expect(NotImplementedError, lambda: kv.set_optimizer(mx.optimizer.SGD()), "update_on_kvstore")
    expect(NotImplementedError, lambda: kv.init(3, mx.nd.ones((2,))), "DistributedOptimizer")
    expect(NotImplementedError, lambda: kv.push(3, mx.nd.ones((2,))), "stores no values")
    expect(NotImplementedError, lambda: kv.pull(3, out=mx.nd.ones((2,))), "stores no values")
    expect(NotImplementedError, lambda: kv.save_optimizer_states("x"), "save_states")
    expect(ValueError, lambda: kv.is_capable("compression"), "Unknown capability")
    assert kv.is_capable("optimizer") is False and kv.is_capable("OPTIMIZER") is False

    # Ranks that disagree on a key's shape: an MXNetError at the read, on every rank, that
    # names the key's collective; the kvstore keeps working afterwards.
    bad = mx.nd.ones((2 + r,))
    kv.pushpull("mismatch", bad)
    expect(MXNetError, bad.asnumpy, "pushpull.mismatch")
    good = mx.nd.ones((3,))
    kv.pushpull("after", good)
    np.testing.assert_allclose(good.asnumpy(), [n] * 3)

    # A peer ends the job: creating a kvstore then fails at once instead of waiting for it.
    if r == n - 1:
        hvd.shutdown()
    else:
        deadline = time.time() + 60
        while hvd.is_initialized() and time.time() < deadline:
            time.sleep(0.05)
        expect(ValueError, lambda: mx.kv.create("horovod"), "peer rank shut down", "job that has ended")

    print("RANK %d OK" % r, flush=True)


if __name__ == "__main__":
    main()
