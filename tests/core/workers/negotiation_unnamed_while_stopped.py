"""Unnamed calls refused because mxhorovod is not running (before init(), after
shutdown()), caught by the script on some ranks only, take no automatic number: after
init() every rank's unnamed calls still meet the peers' (allreduce, grouped_allreduce,
broadcast, allgather, alltoall, reducescatter, broadcast_object, allgather_object,
broadcast_parameters, a DistributedTrainer's gradient names). Before, a refused call kept
its number, so after a shutdown() and init() the rank that had called it was one number
ahead: 'allreduce.noname.2' there met nothing, 'allreduce.noname.1' on the others, and
every rank waited forever (the stall shutdown below turns that into an error)."""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
hvd.shutdown()


def new_net():
    net = gluon.nn.Dense(2, in_units=3, prefix="net_")  # the same keys on every rank
    net.initialize(mx.init.Constant(0.5))
    return net


def step(trainer, net, value):
    with autograd.record():
        loss = net(mx.nd.ones((1, 3)) * value).sum()
    loss.backward()
    trainer.step(1)


def refused_calls():
    """Every unnamed call kind, each refused (not initialized) and caught."""
    x = mx.nd.ones((n, 2))
    calls = [
        lambda: hvd.allreduce(x), lambda: hvd.allreduce_(x), lambda: hvd.grouped_allreduce([x]),
        lambda: hvd.grouped_allreduce_([x]), lambda: hvd.broadcast(x, 0),
        lambda: hvd.broadcast_(x, 0), lambda: hvd.allgather(x), lambda: hvd.grouped_allgather([x]),
        lambda: hvd.alltoall(x), lambda: hvd.reducescatter(x),
        lambda: hvd.grouped_reducescatter([x]), lambda: hvd.broadcast_object(1),
        lambda: hvd.allgather_object(1),
        lambda: hvd.broadcast_parameters(new_net().collect_params()),
    ]
    for call in calls:
        try:
            call()
        except ValueError as e:
            assert "not been initialized" in str(e) or "not initialized" in str(e), str(e)
        else:
            raise AssertionError("accepted while not initialized")
    net = new_net()
    tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    try:
        step(tr, net, 1.0)
    except ValueError as e:
        assert "not been initialized" in str(e) or "not initialized" in str(e), str(e)
    else:
        raise AssertionError("step accepted while not initialized")


def unnamed_calls_meet(tag):
    """Every kind of unnamed call, its values checked on this rank."""
    total = n * (n + 1) / 2
    x = mx.nd.ones((n, 2)) * (r + 1)
    assert (hvd.allreduce(x, op=hvd.Sum).asnumpy() == total).all(), tag
    y = x.copy()
    hvd.allreduce_(y, op=hvd.Sum)
    assert (y.asnumpy() == total).all(), tag
    assert (hvd.grouped_allreduce([x], op=hvd.Sum)[0].asnumpy() == total).all(), tag
    assert (hvd.broadcast(x, n - 1).asnumpy() == n).all(), tag
    g = hvd.allgather(x).asnumpy()
    assert g[:, 0].tolist() == [float(k // n + 1) for k in range(n * n)], (tag, g)
    assert (hvd.grouped_allgather([x])[0].asnumpy() == g).all(), tag
    a = hvd.alltoall(mx.nd.arange(n).reshape((n, 1)) + 10 * r).asnumpy()
    assert a.ravel().tolist() == [float(10 * k + r) for k in range(n)], (tag, a)
    rs = hvd.reducescatter(x, op=hvd.Sum).asnumpy()
    assert rs.shape == (1, 2) and (rs == total).all(), (tag, rs)
    assert hvd.broadcast_object(r, root_rank=n - 1) == n - 1, tag
    assert hvd.allgather_object(r) == list(range(n)), tag
    net = new_net()
    if r == 0:
        net.weight.set_data(mx.nd.ones((2, 3)) * 2)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    assert (net.weight.data().asnumpy() == 2).all(), tag
    tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    step(tr, net, r + 1)
    # d(sum of out)/dW = input (r + 1) per row; the mean over ranks is (n + 1) / 2.
    want = 2 - 0.1 * (n + 1) / 2
    np.testing.assert_allclose(net.weight.data().asnumpy(), np.full((2, 3), want), rtol=1e-6)


# Before the first init() of this session: a fresh start of the numbers anyway.
if r == 0:
    refused_calls()
hvd.init()
unnamed_calls_meet("first")
hvd.shutdown()
# After shutdown(), before init() again: the job has the same ranks, so the global set's
# numbers go on, and must go on alike on every rank.
if r == n - 1:
    refused_calls()
hvd.init()
unnamed_calls_meet("again")
hvd.shutdown()
if r == 0:
    refused_calls()
hvd.init()
unnamed_calls_meet("third")
print("RANK %d OK" % r, flush=True)
