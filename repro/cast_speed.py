"""Time of one float32 -> float16 cast of 25.5M elements (ResNet-50's gradients) and back:
mxhorovod's engine op (single-threaded F16C kernel) against mx.nd.cast (OpenMP over
OMP_NUM_THREADS), alternated, medians of 9 with min-max.
Usage: OMP_NUM_THREADS=k python repro/cast_speed.py"""
import os
import time

import numpy as np
import mxnet as mx
from mxhorovod.compression import _cast

n = 25_557_032
src = mx.nd.random.uniform(-1, 1, shape=(n,))
h = mx.nd.empty((n,), dtype=np.float16)
back = mx.nd.empty((n,), dtype=np.float32)
ways = {
    "mxhorovod to16": lambda: _cast(src, h),
    "mx.nd.cast to16": lambda: mx.nd.cast(src, dtype="float16", out=h),
    "mxhorovod to32": lambda: _cast(h, back),
    "mx.nd.cast to32": lambda: mx.nd.cast(h, dtype="float32", out=back),
}
times = {k: [] for k in ways}
for _ in range(2):  # warm-up (allocation, page faults)
    for f in ways.values():
        f()
mx.nd.waitall()
for _ in range(9):
    for k, f in ways.items():
        t = time.perf_counter()
        f()
        mx.nd.waitall()
        times[k].append(1e3 * (time.perf_counter() - t))
print("OMP_NUM_THREADS=%s" % os.environ.get("OMP_NUM_THREADS"))
for k, v in times.items():
    print("  %-16s median %6.1f ms  (min %.1f, max %.1f)" % (k, np.median(v), min(v), max(v)))
