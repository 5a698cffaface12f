"""Cast speed when the gradient is all NaN (a diverged step): the F16C path sends every
block holding a NaN through the element-wise code. Medians of 7, alternated with mx.nd.cast.
Usage: OMP_NUM_THREADS=1 python repro/cast_speed_nan.py"""
import time

import numpy as np
import mxnet as mx
from mxhorovod.compression import _cast

n = 25_557_032
for fill in (0.5, np.nan):
    src = mx.nd.full((n,), fill)
    h = mx.nd.empty((n,), dtype=np.float16)
    back = mx.nd.empty((n,), dtype=np.float32)
    ways = {"mxhorovod to16": lambda: _cast(src, h),
            "mx.nd.cast to16": lambda: mx.nd.cast(src, dtype="float16", out=h),
            "mxhorovod to32": lambda: _cast(h, back),
            "mx.nd.cast to32": lambda: mx.nd.cast(h, dtype="float32", out=back)}
    times = {k: [] for k in ways}
    for f in ways.values():
        f()
    mx.nd.waitall()
    for _ in range(7):
        for k, f in ways.items():
            t = time.perf_counter()
            f()
            mx.nd.waitall()
            times[k].append(1e3 * (time.perf_counter() - t))
    print("all %s:" % fill)
    for k, v in times.items():
        print("  %-16s median %6.1f ms  (min %.1f, max %.1f)" % (k, np.median(v), min(v), max(v)))
