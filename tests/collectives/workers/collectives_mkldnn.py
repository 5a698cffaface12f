"""Weights that MXNet's MKLDNN backend keeps in its own layout (a 64-channel 3x3 Conv2D
weight after an inference-mode forward pass) are read and written correctly on every rank,
without a hang: broadcast, allreduce (out of place and in place), allgather, grouped
allgather and alltoall right after the forward (and of the forward's output),
and the same with the core's safety net alone (no wait in Python), where every rank either
gets the right values or the same clear error."""
import mxnet as mx
import numpy as np
from mxnet.base import MXNetError

import mxhorovod as hvd
from mxhorovod.collectives import ops as mpi_ops

hvd.init()
r, n = hvd.rank(), hvd.size()


def conv_after_inference(seed):
    mx.random.seed(seed + r)  # different weights per rank
    net = mx.gluon.nn.Conv2D(64, 3, in_channels=64)
    net.initialize(mx.init.Uniform(1.0))
    w = net.weight.data()
    before = w.asnumpy().copy()
    net(mx.nd.ones((1, 64, 8, 8)))  # inference mode: MKLDNN may reorder the weight in place
    return net, w, before


def all_before(before, tag):
    """Every rank's initial weights, through mpi4py-free means: our allgather of a copy."""
    g = hvd.allgather(mx.nd.array(before[None]), name="orig." + tag).asnumpy()
    assert g.shape[0] == n
    return g


# broadcast_ right after the forward.
net, w, before = conv_after_inference(1)
hvd.broadcast_(w, root_rank=0, name="w.bc")
allw = all_before(before, "bc")
np.testing.assert_allclose(w.asnumpy(), allw[0], rtol=1e-6, err_msg="broadcast_ of an MKLDNN weight")
# the layer still works on the broadcast weights
net(mx.nd.ones((1, 64, 8, 8))).wait_to_read()

# allreduce (out of place) and allreduce_ right after the forward.
net, w, before = conv_after_inference(2)
s = hvd.allreduce(w, op=hvd.Sum, name="w.ar")
allw = all_before(before, "ar")
np.testing.assert_allclose(s.asnumpy(), allw.sum(0), rtol=1e-5, atol=1e-5)
net, w, before = conv_after_inference(3)
hvd.allreduce_(w, op=hvd.Average, name="w.ar_")
allw = all_before(before, "ar_")
np.testing.assert_allclose(w.asnumpy(), allw.mean(0), rtol=1e-5, atol=1e-5)

# allgather, grouped_allgather and alltoall right after the forward: they read the input
# in MKLDNN's layout (no settle) and failed on every rank ('We can't generate TBlob for
# MKLDNN data'), for the weight and for the forward's own output (a conv output gathered
# for evaluation), where allreduce and broadcast worked.
net, w, before = conv_after_inference(4)
allw = all_before(before, "ag")
g = hvd.allgather(w, name="w.ag")
np.testing.assert_allclose(g.asnumpy(), allw.reshape((-1,) + w.shape[1:]), rtol=1e-6)
net, w, before = conv_after_inference(5)
allw = all_before(before, "ag_view")
g = hvd.allgather(w.reshape((1, -1)), name="w.ag_view")  # a view of the weight
np.testing.assert_allclose(g.asnumpy(), allw.reshape(n, -1), rtol=1e-6)
net, w, before = conv_after_inference(6)
allw = all_before(before, "gag")
g = hvd.grouped_allgather([w, mx.nd.ones((1, 2))], name="w.gag")
np.testing.assert_allclose(g[0].asnumpy(), allw.reshape((-1,) + w.shape[1:]), rtol=1e-6)
net, w, before = conv_after_inference(7)
allw = all_before(before, "a2a")
rows = 64 // n  # rows r*rows.. of every rank go to rank r
a2a, _ = hvd.alltoall(w, splits=[rows] * n, name="w.a2a")
np.testing.assert_allclose(a2a.asnumpy(), np.concatenate(
    [allw[k][r * rows:(r + 1) * rows] for k in range(n)]), rtol=1e-6)
net, _, _ = conv_after_inference(8)
out = net(mx.nd.ones((n, 64, 8, 8)) * (r + 1))  # an inference-mode output, MKLDNN's layout
mine = out.asnumpy()
alls = hvd.allgather(mx.nd.array(mine), name="out.copy").asnumpy()
out = net(mx.nd.ones((n, 64, 8, 8)) * (r + 1))
np.testing.assert_allclose(hvd.allgather(out, name="out.ag").asnumpy(), alls, rtol=1e-6)
out = net(mx.nd.ones((n, 64, 8, 8)) * (r + 1))
np.testing.assert_allclose(hvd.alltoall(out, name="out.a2a").asnumpy(),
                           alls.reshape(n, n, -1)[:, r].reshape((n,) + mine.shape[1:]), rtol=1e-6)

# The same inside autograd.record() (a loss over every rank's features): a training-mode
# conv output is in MKLDNN's layout too. d(sum over ranks of sum(y*y))/d(feat) = 2 n feat.
net, _, _ = conv_after_inference(9)
x = mx.nd.ones((2, 64, 8, 8)) * (r + 1)
with mx.autograd.record():
    feat = net(x)
    loss = (feat * feat).sum()
loss.backward()
want = net.weight.grad().asnumpy() * n
with mx.autograd.record():
    y = hvd.allgather(net(x), name="out.ag.rec")
    loss = (y * y).sum()
loss.backward()
np.testing.assert_allclose(net.weight.grad().asnumpy(), want, rtol=1e-4)

# The core's own safety net, with the Python wait switched off: right values or the same
# clear error on every rank, never a hang; the next collective works either way.
outcomes = []
for i in range(5):
    net, w, before = conv_after_inference(10 + i)
    with mpi_ops.gradient_reduction():
        hvd.allreduce_(w, op=hvd.Sum, name="w.raw.%d" % i)
    allw = all_before(before, "raw.%d" % i)
    try:
        np.testing.assert_allclose(w.asnumpy(), allw.sum(0), rtol=1e-5, atol=1e-5)
        outcomes.append("ok")
    except MXNetError as e:
        assert "w.raw.%d" % i in str(e) and "MKLDNN" in str(e) and "wait_to_read" in str(e), str(e)
        outcomes.append("error")
    y = hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name="after.%d" % i)
    np.testing.assert_array_equal(y.asnumpy(), np.full((2,), n, "float32"))
every = hvd.allgather(mx.nd.array([[o == "ok" for o in outcomes]], dtype="int32"), name="outcomes").asnumpy()
assert (every == every[0]).all(), "ranks disagree on the outcome: %s" % every
print("rank %d outcomes %s" % (r, outcomes), flush=True)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
