"""Compression.fp16 in DistributedTrainer under mx.npx.set_np() with a float64 parameter:
the new wire path's fallback (mx.nd.cast for pairs other than float32<->float16) refuses
mx.np arrays; the old path (astype) works. Single process, no mpirun needed.
Usage: python repro/np_mode_float64_fp16.py"""
import mxnet as mx

import mxhorovod as hvd
from mxhorovod.compression import wire_path

mx.npx.set_np()
x = mx.np.ones((3,), dtype="float64")
sent, ctx = hvd.Compression.fp16.compress(x)  # old path: fine
print("compress (astype):", sent.dtype, type(sent).__name__)
compress, decompress_into = wire_path(hvd.Compression.fp16)  # what DistributedTrainer calls
try:
    sent, ctx = compress(x, {}, 0)
    sent.wait_to_read()
    print("compress_into: OK", sent.dtype)
except Exception as e:
    print("compress_into FAILED: %s: %s" % (type(e).__name__, str(e)[:160]))
h = mx.np.ones((3,), dtype="float16")
out = mx.np.zeros((3,), dtype="float64")
try:
    decompress_into(h, "float64", out)
    print("decompress_into: OK", out)
except Exception as e:
    print("decompress_into FAILED: %s: %s" % (type(e).__name__, str(e)[:160]))
