"""A SyncBatchNorm layer reaches its collective while a reduction that waits for a peer
holds the custom operators' temporary space (tests/training/test_sync_batch_norm.py runs
it on 2 ranks with MXNET_CPU_TEMP_COPY=1).

MXNet gives the operations pushed from one thread a temporary space of that thread's
(checked here on MXNet 1.9.1: a sum pushed from another thread does not wait), and runs
every custom operator's callbacks on its own pool of threads, one thread while they keep
up. Rank 0 runs a custom operator first whose callback starts an allreduce that the other
ranks join only after the layer's forward, then sums its result: that sum holds the pool
thread's temporary space until they join. Had the layer's own arithmetic taken it (MXNet's
sum does), rank 0 would never reach the layer's collective, nor the others the allreduce:
a hang. This is the hang of two training threads, or of two branches of one graph, whose
layers' forwards start in different orders on the ranks. Prints RANK <r> OK."""
import threading
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, nd

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
started = threading.Event()
held = nd.ones((8,))


class _Hold(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        hvd.allreduce_(held, name="order.held", op=hvd.Sum)
        self.assign(out_data[0], req[0], nd.sum(held))  # the pool thread's temporary space
        started.set()

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        pass


@mx.operator.register("mxhorovod_test_hold")
class _HoldProp(mx.operator.CustomOpProp):
    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        return in_shape, [(1,)], []

    def create_operator(self, ctx, shapes, dtypes):
        return _Hold()


layer = hvd.SyncBatchNorm(in_channels=4, prefix="order_")
layer.initialize()
x = nd.array((np.arange(48, dtype=np.float32).reshape(2, 4, 2, 3) * (r + 1)) % 7)
x.wait_to_read()
result = {}


def run():
    if r == 0:
        pending = nd.Custom(nd.zeros((1,)), op_type="mxhorovod_test_hold")
        started.wait()
        time.sleep(0.2)  # the pool thread back to waiting, so that it takes the next callback
    with autograd.train_mode():
        y = layer(x)
    result["y"] = y.sum(axis=(0, 2, 3)).asnumpy()
    if r != 0:
        hvd.allreduce_(held, name="order.held", op=hvd.Sum)
        pending = held[0:1] * 8
    result["held"] = pending.asnumpy()


worker = threading.Thread(target=run, daemon=True)
worker.start()
worker.join(60)
assert not worker.is_alive(), ("rank %d: SyncBatchNorm waited behind an operation that "
                               "waits for a peer" % r)
assert np.allclose(result["held"], 8 * n), (r, result["held"])
# The layer normalized the whole batch: per channel its outputs sum to 0 over the ranks.
total = hvd.allreduce(nd.array(result["y"]), op=hvd.Sum, name="order.check").asnumpy()
assert np.allclose(total, 0, atol=1e-3), (r, total)

# Two threads, each training a network of its own: their layers' forwards and backwards
# interleave differently on each rank (with MXNet's operators in the layer: a hang now and
# then).
nets = [hvd.SyncBatchNorm(in_channels=4, prefix="thread%d_" % i) for i in range(2)]
for net in nets:
    net.initialize()
losses = {}


def train(i):
    rng = np.random.RandomState(10 * r + i)
    for step in range(8):
        data = nd.array(rng.randn(3, 4, 2, 2).astype(np.float32))
        with autograd.record():
            loss = (nets[i](data) ** 2).sum()
        loss.backward()
        losses[i, step] = float(loss.asscalar())


threads = [threading.Thread(target=train, args=(i,), daemon=True) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join(60)
assert not any(t.is_alive() for t in threads), "rank %d: two training threads hung" % r
# Normalized over the whole batch (beta 0, gamma 1): the squares sum to the whole batch's
# element count over the ranks.
for i in range(2):
    total = hvd.allreduce(nd.array([losses[i, 7]]), op=hvd.Sum, name="order.loss%d" % i)
    assert np.allclose(total.asnumpy(), n * 3 * 4 * 2 * 2, rtol=1e-3), (r, i, total)
print("RANK %d OK" % r, flush=True)
