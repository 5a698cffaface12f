"""Collectives inside autograd.record() are differentiated (mxhorovod/collectives/autograd.py):
each gradient against the closed form of the sum of every rank's loss, and a layer whose
output is centred by the mean over all ranks (a synchronized BatchNorm's first step)
trained by DistributedTrainer against one process on the concatenated batch. Before, the
inputs' gradients stayed zero without a word.

Usage: autograd_collectives.py   (also under MXNET_ENGINE_TYPE=NaiveEngine, and npx.set_np)
"""
import sys

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
NP = "np" in sys.argv[1:]
if NP:
    mx.npx.set_np()


def arr(a):
    return mx.np.array(a, dtype="float32") if NP else mx.nd.array(a, dtype="float32")


def check(what, got, want):
    np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-5,
                               err_msg="%s on rank %d" % (what, r))


def allreduce_ops():
    for k, (op, pre, post) in enumerate([(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0),
                                         (hvd.Sum, 0.5, 3.0), (hvd.Average, 2.0, 0.25)]):
        x = arr(np.arange(3) + r + 1)
        x.attach_grad()
        w = arr(np.arange(3) * (r + 2))
        with autograd.record():
            y = hvd.allreduce(x * 3, op=op, prescale_factor=pre, postscale_factor=post,
                              name=None if k % 2 else "ar.%d" % k)
            loss = (y * w).sum()
        loss.backward()
        scale = pre * post / (n if op == hvd.Average else 1)
        check("allreduce %d" % k, x.grad, 3 * scale * sum(np.arange(3) * (q + 2) for q in range(n)))


def allgather_uneven():
    x = arr(np.ones((r + 1, 2)) * (r + 1))
    x.attach_grad()
    with autograd.record():
        g = hvd.allgather(x * 2, name="ag")
        loss = (g * g).sum() * (r + 1)
    loss.backward()
    gathered = np.concatenate([np.ones((q + 1, 2)) * (q + 1) * 2 for q in range(n)])
    start = sum(q + 1 for q in range(r))
    check("allgather", x.grad, sum(range(1, n + 1)) * 4 * gathered[start:start + r + 1])


def broadcast_root():
    for root in range(n):
        x = arr(np.ones(2) * (r + 1))
        x.attach_grad()
        with autograd.record():
            loss = (hvd.broadcast(x, root_rank=root) * (r + 1)).sum()
        loss.backward()
        check("broadcast from %d" % root, x.grad, np.ones(2) * (n * (n + 1) / 2 if r == root else 0))


def reducescatter_and_alltoall():
    x = arr(np.arange(2 * n * 2).reshape(2 * n, 2))
    x.attach_grad()
    with autograd.record():
        loss = (hvd.reducescatter(x, op=hvd.Average) * (r + 1)).sum()
    loss.backward()
    check("reducescatter", x.grad, np.concatenate([np.ones((2, 2)) * (q + 1) for q in range(n)]) / n)
    x = arr(np.arange(n * 3).reshape(n * 3, 1) + 100 * r)
    x.attach_grad()
    with autograd.record():
        y, _ = hvd.alltoall(x, splits=[1] * (n - 1) + [2 * n + 1])
        loss = (y * y).sum()
    loss.backward()
    check("alltoall", x.grad, 2 * x.asnumpy())
    # splits adding up to fewer rows than x has: the rows sent nowhere get zero (backward
    # raised "could not be broadcast together with remapped shapes").
    x = arr(np.arange(n + 2).reshape(n + 2, 1) + 100 * r)
    x.attach_grad()
    with autograd.record():
        y, _ = hvd.alltoall(x, splits=[1] * n)
        loss = (y * y).sum()
    loss.backward()
    check("alltoall, rows not sent", x.grad, np.r_[2 * x.asnumpy()[:n], np.zeros((2, 1))])


def alltoall_to_rank0():
    """mx.np only (a legacy NDArray holds no 0-size shape): every rank sends all its rows to
    rank 0, so the others receive none. Their backward failed (MXNet hands it a legacy
    0-size array) and rank 0 waited forever for their transposed alltoall."""
    if not NP:
        return
    x = arr(np.arange(4).reshape(2, 2) + 10 * r)
    x.attach_grad()
    with autograd.record():
        y, _ = hvd.alltoall(x, splits=[2] + [0] * (n - 1))
        assert y.shape == ((2 * n, 2) if r == 0 else (0, 2)), y.shape
        loss = (y * y).sum() * (r + 1)
    loss.backward()
    check("alltoall to rank 0", x.grad, 2 * x.asnumpy())


def scalar_loss():
    """Under npx.set_np a loss is 0-d: its mean over the ranks (and a broadcast of it) is
    differentiated (backward raised "_copyto inferring shapes failed")."""
    if not NP:
        return
    x = arr(np.array([1.0, 2.0]) * (r + 1))
    x.attach_grad()
    with autograd.record():
        loss = (x * x).sum()
        out = hvd.allreduce(loss) * 2 + hvd.broadcast(loss, root_rank=0)
        assert out.shape == (), out.shape
    out.backward()
    check("0-d allreduce and broadcast", x.grad, (2 + n * (r == 0)) * 2 * x.asnumpy())


def accumulated_leaf():
    """A leaf with grad_req='add' (gradient accumulation over 2 passes) given straight to a
    collective, as a sharded weight is allgathered: its gradient was silently left at 0
    (MXNet's Function never adds)."""
    x, y = arr(np.ones((2, 2)) * (r + 1)), arr(np.ones(2))
    for a in (x, y):
        a.attach_grad(grad_req="add")
    for _ in range(2):
        with autograd.record():  # one use each (two uses are summed before the leaf)
            loss = (hvd.allgather(x) * (r + 1)).sum() + hvd.allreduce(y, op=hvd.Sum).sum()
        loss.backward()
    check("accumulated leaf, allgather", x.grad, n * (n + 1) * np.ones((2, 2)))
    check("accumulated leaf, allreduce", y.grad, 2 * n * np.ones(2))


def not_recorded():
    """Max, integer inputs and a call refused at the call keep their old behaviour; the
    refusal leaves recording on."""
    x = arr(np.ones(2))
    x.attach_grad()
    with autograd.record():
        y = hvd.allreduce(x, op=hvd.Max, name="max")
        try:
            hvd.allreduce(x, op=9, name="bad_op")
        except ValueError:
            pass
        assert autograd.is_recording(), "a refused call turned recording off"
        loss = (x * y).sum()
    loss.backward()
    check("max", x.grad, np.ones(2))
    ints = hvd.allreduce(mx.nd.ones((2,), dtype="int32"), op=hvd.Sum, name="int")
    assert ints.asnumpy().tolist() == [n, n]


def in_place_on_recorded_arrays():
    """allreduce_, broadcast_ and grouped_allreduce_ inside autograd.record() on an array
    of the graph (a recorded result, a leaf with attach_grad) are refused at the call on
    the rank that made them, as MXNet refuses x[:] = ... there, and the peers' call of the
    name fails naming that rank. Before, the result was written behind autograd's back:
    x.grad was 2 where the Sum over the ranks makes it 2 * n, silently. Arrays autograd
    does not track (a gradient, a fresh array) are still reduced in place inside record."""
    calls = (("allreduce_", lambda t, nm: hvd.allreduce_(t, op=hvd.Sum, name=nm)),
             ("broadcast_", lambda t, nm: hvd.broadcast_(t, 0, name=nm)),
             ("grouped_allreduce_", lambda t, nm: hvd.grouped_allreduce_([t], name=nm)))
    for k, (what, call) in enumerate(calls):
        x = arr(np.ones(2))
        x.attach_grad()
        refuser = k % n  # the others submit the call and must fail too, not wait
        with autograd.record():
            y = x * 2
            if r == refuser:
                try:
                    call(y if k != 1 else x, "inplace.%d" % k)
                except ValueError as e:
                    assert "part of the graph that autograd.record() is recording" in str(e), e
                    assert what in str(e) and "inplace.%d" % k in str(e), e
                else:
                    raise AssertionError("%s of a recorded array accepted" % what)
            else:
                try:
                    call(mx.nd.ones((2,)) if not NP else mx.np.ones((2,)), "inplace.%d" % k)
                    mx.nd.waitall()
                except mx.base.MXNetError as e:
                    assert "failed on rank %d" % refuser in str(e), e
                else:
                    raise AssertionError("the peers of a refused %s went on" % what)
            loss = (y * arr([1.0, 2.0])).sum()
        loss.backward()
        check(what + " refused, gradient", x.grad, [2.0, 4.0])
    x = arr(np.ones(2))
    x.attach_grad()
    with autograd.record():
        fresh = arr(np.ones(2)) * (r + 1)  # no input autograd tracks: not in the graph
        hvd.allreduce_(fresh, op=hvd.Sum, name="inplace.fresh")
        loss = (x * fresh).sum()
    loss.backward()
    check("in place on a fresh array", x.grad, np.full(2, n * (n + 1) / 2))
    g = x.grad
    with autograd.record():  # a gradient is not in the graph either
        hvd.allreduce_(g, op=hvd.Sum, name="inplace.grad")
    check("in place on a gradient", g, np.full(2, n * n * (n + 1) / 2))


def centred(net, x, distributed):
    """Dense, then minus the mean of its outputs over the whole batch (every rank's rows)."""
    h = net(x)
    if not distributed:
        return h - h.mean(axis=0, keepdims=True)
    total = hvd.allreduce(h.sum(axis=0, keepdims=True), op=hvd.Sum, name="centre")
    return h - total / (x.shape[0] * n)


def synced_centring_trains_as_one_process():
    rng = np.random.RandomState(3)
    B = 3
    X = rng.randn(3, n * B, 4).astype("float32")
    Y = rng.randn(3, n * B, 2).astype("float32")
    nets = []
    for tag in ("dist_", "ref_"):
        net = gluon.nn.Dense(2, in_units=4, prefix="sync_" + tag)
        net.initialize(mx.init.Constant(0.1) if tag == "ref_" else mx.init.Uniform())
        nets.append(net)
    net, ref = nets
    hvd.broadcast_parameters(net.collect_params())
    ref.weight.set_data(net.weight.data())
    ref.bias.set_data(net.bias.data())
    tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.5})
    ref_tr = gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.5}, kvstore=None)
    for s in range(3):
        with autograd.record():
            out = centred(net, arr(X[s, r * B:(r + 1) * B]), True)
            loss = ((out - arr(Y[s, r * B:(r + 1) * B])) ** 2).sum()
        loss.backward()
        tr.step(B)
        with autograd.record():
            loss = ((centred(ref, arr(X[s]), False) - arr(Y[s])) ** 2).sum()
        loss.backward()
        ref_tr.step(n * B)
    for p, q in zip((net.weight, net.bias), (ref.weight, ref.bias)):
        np.testing.assert_allclose(p.data().asnumpy(), q.data().asnumpy(), rtol=1e-4, atol=1e-5,
                                   err_msg="%s on rank %d" % (p.name, r))


for scenario in (allreduce_ops, allgather_uneven, broadcast_root, reducescatter_and_alltoall,
                 alltoall_to_rank0, scalar_loss, accumulated_leaf, not_recorded, in_place_on_recorded_arrays,
                 synced_centring_trains_as_one_process):
    scenario()
mx.nd.waitall()
print("RANK %d OK" % r, flush=True)
