"""The cast engine operation (mxhorovod._core.cast, what Compression.fp16 runs in
DistributedTrainer) on awkward arrays, each against mx.nd.cast, bit for bit.
Single process. Usage: python repro/cast_edge_cases.py"""
import threading

import numpy as np
import mxnet as mx
from mxhorovod import _core
from mxhorovod.compression import _cast

rng = np.random.RandomState(0)
results = []


def check(name, src, out, expect_err=None):
    print("..", name, flush=True)
    try:
        want = mx.nd.cast(src.as_nd_ndarray(), dtype=np.dtype(out.dtype).name).asnumpy()
        _cast(src, out)
        got = out.asnumpy()
        ok = got.tobytes() == want.tobytes()
        results.append((name, "OK" if ok else "WRONG BITS"))
    except Exception as e:  # noqa
        results.append((name, "raised %s: %s" % (type(e).__name__, str(e).splitlines()[0][:200])))


def f32(n):
    return mx.nd.array(rng.randn(n) * 1e3, dtype=np.float32)


for n in (1, 15, 16, 17, 31, 33, 4097):
    check("size %d" % n, f32(n), mx.nd.empty((n,), dtype=np.float16))
big = f32(100)
check("slice src big[3:20]", big[3:20], mx.nd.empty((17,), dtype=np.float16))
h = mx.nd.zeros((100,), dtype=np.float16)
check("slice dst h[5:22]", big[3:20], h[5:22])
hv = h.asnumpy().view(np.uint16)
results.append(("slice dst leaves the rest alone",
                "OK" if (hv[:5] == 0).all() and (hv[22:] == 0).all() else "WRONG: wrote outside"))
m2 = mx.nd.array(rng.randn(10, 4), dtype=np.float32)
check("2-D row slice m2[2:5]", m2[2:5], mx.nd.empty((3, 4), dtype=np.float16))
check("m2[7] (one row, a view)", m2[7], mx.nd.empty((4,), dtype=np.float16))
check("reshape view", m2.reshape((4, 10)), mx.nd.empty((4, 10), dtype=np.float16))
check("cpu(1) arrays", mx.nd.array(rng.randn(33), ctx=mx.cpu(1)),
      mx.nd.empty((33,), ctx=mx.cpu(1), dtype=np.float16))
check("cpu_pinned arrays", mx.nd.array(rng.randn(33), ctx=mx.cpu_pinned(0)),
      mx.nd.empty((33,), ctx=mx.cpu_pinned(0), dtype=np.float16))
check("cpu_shared arrays", mx.nd.array(rng.randn(33), ctx=mx.Context("cpu_shared", 0)),
      mx.nd.empty((33,), ctx=mx.Context("cpu_shared", 0), dtype=np.float16))
check("cpu(0) into cpu(1)", f32(33), mx.nd.empty((33,), ctx=mx.cpu(1), dtype=np.float16))
check("float16 -> float32 slice", mx.nd.array(rng.randn(50), dtype=np.float16)[1:40],
      mx.nd.empty((39,), dtype=np.float32))
# A temporary source, freed by Python at once; a lazily computed source.
out = mx.nd.empty((1000,), dtype=np.float16)
_cast(f32(1000) * 2, out)  # freed by Python when _cast returns, before the op runs
out.wait_to_read()
results.append(("freed temporary source", "OK (no crash)"))
# MKLDNN layout: a 64-channel conv weight after an inference-mode forward.
conv = mx.gluon.nn.Conv2D(64, 3, in_channels=64)
conv.initialize()
conv(mx.nd.ones((1, 64, 8, 8)))  # no wait: the weight may be reordered while it runs
w = conv.weight.data()
check("MKLDNN-layout source (64ch conv weight, no wait)", w,
      mx.nd.empty(w.shape, dtype=np.float16))
conv(mx.nd.ones((1, 64, 8, 8))).wait_to_read()
check("MKLDNN-layout source (after wait_to_read)", w, mx.nd.empty(w.shape, dtype=np.float16))
hw = mx.nd.array(rng.randn(*w.shape), dtype=np.float16)
conv(mx.nd.ones((1, 64, 8, 8))).wait_to_read()
check("MKLDNN-layout destination (cast INTO the conv weight)", hw, w)
# Several Python threads casting at once into their own arrays.
errs = []


def worker(k):
    try:
        for _ in range(50):
            s = f32(4097 + k)
            o = mx.nd.empty(s.shape, dtype=np.float16)
            _cast(s, o)
            if o.asnumpy().tobytes() != s.astype("float16").asnumpy().tobytes():
                errs.append(k)
    except Exception as e:  # noqa
        errs.append(repr(e))


ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
results.append(("4 threads x 50 casts", "OK" if not errs else "WRONG %s" % errs[:3]))
# np mode: 0-d and 0-size arrays.
mx.npx.set_np()
check("np 0-d array", mx.np.array(3.14159, dtype=np.float32), mx.np.zeros((), dtype=np.float16))
check("np 0-size array (0, 3)", mx.np.zeros((0, 3), dtype=np.float32),
      mx.np.zeros((0, 3), dtype=np.float16))
check("np float64 (fallback path)", mx.np.ones((5,), dtype=np.float64),
      mx.np.zeros((5,), dtype=np.float16))
mx.npx.reset_np()
for name, r in results:
    print("%-55s %s" % (name, r))
