"""The cast engine op on an array of more than 2^31 bytes (2^29 + 17 float32 elements,
2 GiB; ~7 GiB of RAM in all), and the float16 result cast back: against mx.nd.cast.
Usage: python repro/cast_large.py"""
import time

import numpy as np
import mxnet as mx
from mxhorovod.compression import _cast

n = (1 << 29) + 17
src = mx.nd.empty((n,), dtype=np.float32)
src[:] = mx.nd.arange(0, n, dtype=np.float32) * np.float32(1.0 / 4096)  # 0 .. 131072
src[n - 5:] = mx.nd.array([np.nan, np.inf, -0.0, 65520.0, 1e-30])
h = mx.nd.empty((n,), dtype=np.float16)
t = time.time()
_cast(src, h)
h.wait_to_read()
t1 = time.time() - t
want = mx.nd.cast(src, dtype="float16")
same = bool((h.asnumpy().view(np.uint16) == want.asnumpy().view(np.uint16)).all())
del want
print("float32 -> float16, %d elements: %s (%.2f s)" % (n, "same bits" if same else "DIFFERENT", t1))
back = mx.nd.empty((n,), dtype=np.float32)
_cast(h, back)
want = mx.nd.cast(h, dtype="float32")
same = bool((back.asnumpy().view(np.uint32) == want.asnumpy().view(np.uint32)).all())
print("float16 -> float32: %s" % ("same bits" if same else "DIFFERENT"))
print("last 5:", h[n - 5:].asnumpy(), back[n - 5:].asnumpy())
