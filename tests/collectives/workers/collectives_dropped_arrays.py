"""Collectives whose caller drops its arrays right after the call: the operation must
still read and write the right memory, whether MXNet runs it during the push (inputs
ready) or later (it waits for its inputs' writer, or for an earlier call of its name), and
for arrays over memory MXNet does not own (``mx.nd.from_numpy(zero_copy=True)``: that
memory goes as soon as the last NDArray on it does, not after the engine's operations on
it, so only the collective's own reference keeps it). Out-of-place outputs read later,
in-place or dropped outputs that nobody reads; every rank checked."""
import gc
import threading

import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
total = n * (n + 1) / 2  # sum over ranks of (rank + 1)


def slow(value, shape=(64,)):
    """An array whose producer is still queued when the collective is pushed."""
    a = mx.nd.ones((200, 200))
    for _ in range(3):
        a = mx.nd.dot(a, a) / 200.0
    return mx.nd.zeros(shape) + a[0:1, 0:1].reshape((1,)) * value  # a is all ones


def ready(value, shape=(64,)):
    a = mx.nd.full(shape, value)
    a.wait_to_read()
    return a


def numpy_backed(value, shape=(64,)):
    return mx.nd.from_numpy(np.full(shape, value, dtype=np.float32), zero_copy=True)


for kind, make in (("ready", ready), ("slow", slow), ("numpy", numpy_backed)):
    # Out of place, the input dropped at once (nothing else refers to it).
    outs = [hvd.allreduce(make(r + 1), name="%s.ar.%d" % (kind, i), op=hvd.Sum) for i in range(20)]
    gc.collect()
    for i, o in enumerate(outs):
        assert np.allclose(o.asnumpy(), total), (kind, i, o.asnumpy()[:4], r)
    gs = [hvd.allgather(make(r + 1, (2, 3)), name="%s.ag.%d" % (kind, i)) for i in range(10)]
    bs = [hvd.broadcast(make(r + 1), root_rank=n - 1, name="%s.bc.%d" % (kind, i)) for i in range(10)]
    gc.collect()
    want_g = np.concatenate([np.full((2, 3), k + 1.0) for k in range(n)])
    for i, (g, b) in enumerate(zip(gs, bs)):
        assert np.allclose(g.asnumpy(), want_g), (kind, i, g.asnumpy(), r)
        assert np.allclose(b.asnumpy(), n), (kind, i, b.asnumpy()[:4], r)
    # In place, and outputs nobody keeps: the job goes on and later results are right.
    for i in range(20):
        hvd.allreduce_(make(r + 1), name="%s.ip.%d" % (kind, i), op=hvd.Sum)
        hvd.allreduce(make(r + 1), name="%s.lost.%d" % (kind, i))
    hvd.grouped_allreduce_([make(r + 1) for _ in range(5)], name="%s.g" % kind)
    gc.collect()
    mx.nd.waitall()

# One name called twice in a row: the second call waits in its name's line (its input is
# ready, so MXNet runs it during the push, but it must not go to the core before the
# first completes): it keeps copies of the handles, and the caller drops them.
outs = []
for i in range(30):
    make = (slow, ready, numpy_backed)[i % 3]
    outs.append(hvd.allreduce(make(r + 1, (4096,)), name="line", op=hvd.Sum))
gc.collect()
for i, o in enumerate(outs):
    assert np.allclose(o.asnumpy(), total), (i, o.asnumpy()[:4], r)

# Several threads calling with temporaries at once (named: the order differs per rank).
errors = []


def worker(t):
    try:
        res = [hvd.allreduce((slow, ready, numpy_backed)[k % 3](r + 1), op=hvd.Sum,
                             name="thr%d.%d" % (t, k)) for k in range(15)]
        gc.collect()
        for k, o in enumerate(res):
            assert np.allclose(o.asnumpy(), total), (t, k, o.asnumpy()[:4], r)
    except Exception as e:  # noqa: BLE001 - reported below with the rank
        errors.append(repr(e))


threads = [threading.Thread(target=worker, args=(t,)) for t in range(3)]
for th in threads:
    th.start()
for th in threads:
    th.join()
assert not errors, (r, errors)
print("RANK %d OK" % r, flush=True)
hvd.shutdown()
