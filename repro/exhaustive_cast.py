"""Every float32 bit pattern (2^32) and every float16 one: mxhorovod's cast (engine
operation on the AVX2 path, and the portable kernel through ctypes) against mx.nd.cast.
Prints the number of mismatches per path. ~2-4 min on 2 cores.
Usage: OMP_NUM_THREADS=1 python repro/exhaustive_cast.py [log2 chunk]"""
import ctypes
import sys
import time

import numpy as np
import mxnet as mx
from mxhorovod import _core

fn = ctypes.CDLL(_core.__file__).mxhorovod_float16_kernel
fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
               ctypes.c_double]
CHUNK = 1 << int(sys.argv[1] if len(sys.argv) > 1 else 24)
bad = {"engine": 0, "portable": 0, "avx2-kernel": 0}
first = {}
t0 = time.time()
src = mx.nd.empty((CHUNK,), dtype=np.float32)
half = mx.nd.empty((CHUNK,), dtype=np.float16)
for start in range(0, 1 << 32, CHUNK):
    bits = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32)
    src[:] = bits.view(np.float32)  # bit-exact copy? checked below
    assert np.array_equal(src.asnumpy().view(np.uint32), bits)
    want = mx.nd.cast(src, dtype="float16").asnumpy().view(np.uint16)
    _core.cast(src.handle.value, half.handle.value, 0)
    got = {"engine": half.asnumpy().view(np.uint16)}
    for name, path in (("portable", 0), ("avx2-kernel", 1)):
        out = np.zeros(CHUNK, np.uint16)
        assert fn(path, 6, bits.ctypes.data, out.ctypes.data, CHUNK, 1.0) == 0
        got[name] = out
    for name, g in got.items():
        d = np.flatnonzero(g != want)
        bad[name] += d.size
        if d.size and name not in first:
            first[name] = (hex(bits[d[0]]), hex(g[d[0]]), hex(want[d[0]]))
print("float32 -> float16 mismatches:", bad, "first:", first, "%.0f s" % (time.time() - t0))
# float16 -> float32, every pattern
h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
hn = mx.nd.array(h.view(np.float16), dtype=np.float16)
assert np.array_equal(hn.asnumpy().view(np.uint16), h)
want = mx.nd.cast(hn, dtype="float32").asnumpy().view(np.uint32)
f = mx.nd.empty(hn.shape, dtype=np.float32)
_core.cast(hn.handle.value, f.handle.value, 0)
nb = {"engine": int((f.asnumpy().view(np.uint32) != want).sum())}
for name, path in (("portable", 0), ("avx2-kernel", 1)):
    out = np.zeros(h.size, np.uint32)
    fn(path, 7, h.ctypes.data, out.ctypes.data, h.size, 1.0)
    d = np.flatnonzero(out != want)
    nb[name] = d.size
    if d.size:
        print(name, "first", hex(h[d[0]]), hex(out[d[0]]), hex(want[d[0]]))
print("float16 -> float32 mismatches:", nb)
