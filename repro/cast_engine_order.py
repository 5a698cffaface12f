"""Engine ordering of the cast op against slow neighbours (run with
MXNET_CPU_WORKER_NTHREADS=4 so that ops could overlap): read-after-write on the source,
write-after-read on the source, write-after-read on the destination, read-after-write on
the destination. Usage: MXNET_CPU_WORKER_NTHREADS=4 python repro/cast_engine_order.py"""
import numpy as np
import mxnet as mx
from mxhorovod.compression import _cast

n = 1 << 22
bad = 0
for trial in range(20):
    a = mx.nd.random.uniform(shape=(n,), dtype=np.float32)
    a_np = a.asnumpy()
    out = mx.nd.ones((n,), dtype=np.float16)
    y = mx.nd.sqrt(mx.nd.exp(a) * 3.0 + a * a)  # slow writer of y
    z = out.astype("float32") * 2               # a reader of out, queued before the cast
    _cast(y, out)                               # must wait for y, and for z's read of out
    y[:] = -1                                   # must wait for the cast's read of y
    w = out.astype("float32") + 1               # must see the cast's result
    ref = mx.nd.sqrt(mx.nd.exp(a) * 3.0 + a * a)  # the same ops again: the same bits
    want = mx.nd.cast(ref, dtype="float16").asnumpy()
    ok = (out.asnumpy().view(np.uint16) == want.view(np.uint16)).all() and \
        (z.asnumpy() == 2).all() and (w.asnumpy() == want.astype(np.float32) + 1).all()
    bad += not ok
print("engine order: %d of 20 trials wrong" % bad)
