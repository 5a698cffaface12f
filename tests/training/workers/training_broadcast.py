"""broadcast_parameters, broadcast_object, allgather_object (issue 3, item 4).

Every rank starts from different values; after the broadcast each rank must hold exactly
rank 0's values, checked through the core's allgather.
"""
import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd
from training_common import assert_same_on_all_ranks


def values(params):
    return [p.data().asnumpy() for _, p in sorted(params.items())]


def deferred_init():
    """Shapes unknown until the first forward: the broadcast happens there."""
    net = gluon.nn.HybridSequential(prefix="deferred_")
    with net.name_scope():
        net.add(gluon.nn.Dense(5, activation="relu"))
        net.add(gluon.nn.Dense(2))
    net.initialize(mx.init.Uniform(1.0 + hvd.rank()))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    out = net(mx.nd.ones((3, 7)))  # triggers initialization, then the broadcast
    assert_same_on_all_ranks(values(net.collect_params()), "deferred")
    assert_same_on_all_ranks([out.asnumpy()], "deferred_out")
    # The hook ran once: loading on one rank only must not start a collective now.
    assert "_init_impl" not in vars(net[0].weight)


def after_inference_forward():
    """64-channel 3x3 conv after an inference-mode forward (MKLDNN layout, DESIGN.md trap)."""
    net = gluon.nn.HybridSequential(prefix="mkldnn_")
    with net.name_scope():
        net.add(gluon.nn.Conv2D(64, 3, padding=1, in_channels=64))
        net.add(gluon.nn.Conv2D(64, 3, padding=1, in_channels=64))
    mx.random.seed(100 + hvd.rank())
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.ones((1, 64, 8, 8))).wait_to_read()  # inference mode: no autograd.record
    hvd.broadcast_parameters(net.collect_params(), root_rank=hvd.size() - 1)
    got = values(net.collect_params())
    assert_same_on_all_ranks(got, "mkldnn")
    # Training still works on the broadcast weights.
    with autograd.record():
        loss = net(mx.nd.ones((1, 64, 8, 8))).sum()
    loss.backward()
    mx.nd.waitall()


def module_dicts():
    """Module's arg_params / aux_params dicts (NDArray values)."""
    rng = np.random.RandomState(hvd.rank())
    arg = {"fc_weight": mx.nd.array(rng.randn(4, 3)), "fc_bias": mx.nd.array(rng.randn(4))}
    aux = {"bn_moving_mean": mx.nd.array(rng.randn(4))}
    hvd.broadcast_parameters(arg, root_rank=0)
    hvd.broadcast_parameters(aux, root_rank=0, prefix="aux.")
    want = np.random.RandomState(0).randn(4, 3)
    np.testing.assert_allclose(arg["fc_weight"].asnumpy(), want.astype(np.float32))
    assert_same_on_all_ranks([v.asnumpy() for _, v in sorted(arg.items())], "arg")
    assert_same_on_all_ranks([aux["bn_moving_mean"].asnumpy()], "aux")
    for bad in ([mx.nd.ones((2,))], {"a": 3}):
        try:
            hvd.broadcast_parameters(bad)
        except ValueError:
            pass
        else:
            raise AssertionError("broadcast_parameters(%r) must raise ValueError" % (bad,))


def objects():
    root = hvd.size() - 1
    obj = {"epoch": 7, "lr": 0.125, "names": ["a", "b"]} if hvd.rank() == root else None
    got = hvd.broadcast_object(obj, root_rank=root)
    assert got == {"epoch": 7, "lr": 0.125, "names": ["a", "b"]}, got
    # Objects of different sizes and types per rank.
    mine = ("rank", hvd.rank(), list(range(hvd.rank() * 50)))
    everyone = hvd.allgather_object(mine)
    assert everyone == [("rank", r, list(range(r * 50))) for r in range(hvd.size())]
    arr = hvd.broadcast_object(np.arange(6.0).reshape(2, 3) * (hvd.rank() + 1), root_rank=0)
    np.testing.assert_array_equal(arr, np.arange(6.0).reshape(2, 3))
    # cloudpickle, as Horovod: a lambda closing over a local, a locally defined class.
    k = 3 + root
    f = hvd.broadcast_object((lambda v: v * k) if hvd.rank() == root else None, root_rank=root)
    assert f(2) == 2 * (3 + root), f(2)

    class Local:
        def __init__(self, v):
            self.v = v
    got = hvd.allgather_object(Local(hvd.rank()))
    assert [o.v for o in got] == list(range(hvd.size()))

    # An object the root cannot pickle: every rank raises (none waits for the data), and
    # the next collective works.
    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("no pickling here")
    for call in (lambda: hvd.broadcast_object(Unpicklable(), root_rank=root),
                 lambda: hvd.allgather_object(Unpicklable() if hvd.rank() == root else 1)):
        try:
            call()
        except ValueError as e:
            assert "rank" in str(e) and str(root) in str(e) and "could not pickle" in str(e), e
            if hvd.rank() == root:
                assert "no pickling here" in str(e), e
        else:
            raise AssertionError("an unpicklable object was not refused on every rank")
    assert hvd.broadcast_object("after", root_rank=0) == "after"


def objects_in_pieces():
    """Pickles larger than one collective's piece (1 GiB, lowered here to 1000 bytes) go in
    several collectives: MXNet cannot make a uint8 array of 2**31 - 1 elements, so a 2 GiB
    pickle made the root raise alone and the other ranks wait forever (breaker finding)."""
    import mxhorovod.collectives.objects as functions
    saved = functions._CHUNK_BYTES
    functions._CHUNK_BYTES = 1000
    try:
        root = hvd.size() - 1
        big = np.arange(1234, dtype=np.float64) * (root + 1)  # ~9.9 KB pickled: 10 pieces
        got = hvd.broadcast_object(big if hvd.rank() == root else None, root_rank=root)
        np.testing.assert_array_equal(got, np.arange(1234, dtype=np.float64) * (root + 1))
        # Sizes per rank from one piece to many, and an exact multiple of a piece.
        sizes = [10, 4000, 333 * hvd.size()][:hvd.size()] + [7] * max(0, hvd.size() - 3)
        mine = bytes([hvd.rank()]) * sizes[hvd.rank()]
        everyone = hvd.allgather_object(mine)
        assert everyone == [bytes([q]) * sizes[q] for q in range(hvd.size())], \
            [len(e) for e in everyone]
        got = hvd.broadcast_object(b"x" * 2000, root_rank=0)  # exactly 2 pieces' worth
        assert got == b"x" * 2000
    finally:
        functions._CHUNK_BYTES = saved
    assert hvd.allgather_object(hvd.rank()) == list(range(hvd.size()))


def different_keys():
    """Ranks passing different keys: ValueError on every rank naming them, before anything
    is broadcast (the broadcasts are named by key: the ranks waited forever, as Horovod's)."""
    if hvd.rank() == 0:
        gluon.nn.Dense(1)  # a rank-0 helper: the net's automatic names shift on rank 0
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(4, in_units=3))
    net.initialize()
    for params in (net.collect_params(),
                   {"w": mx.nd.ones((2,)), "extra%d" % hvd.rank(): mx.nd.ones((1,))}):
        try:
            hvd.broadcast_parameters(params)
            raise AssertionError("different keys accepted")
        except ValueError as e:
            msg = str(e)
        assert "different parameter names" in msg, msg
        if isinstance(params, dict):
            assert "rank 1 has 'extra1' that rank 0 has not and lacks 'extra0'" in msg, msg
        else:
            assert "rank 1 has 'dense" in msg and "prefix" in msg, msg
    # The same keys everywhere still work (and the next collectives meet).
    arrays = {"w": mx.nd.ones((2,)) * hvd.rank()}
    hvd.broadcast_parameters(arrays, root_rank=1)
    np.testing.assert_array_equal(arrays["w"].asnumpy(), [1, 1])


def main():
    hvd.init()
    for f in (deferred_init, after_inference_forward, module_dicts, objects,
              objects_in_pieces, different_keys):
        f()
        if hvd.rank() == 0:
            print("scenario %s ok" % f.__name__, flush=True)
    print("RANK %d OK" % hvd.rank(), flush=True)


if __name__ == "__main__":
    main()
