"""HOROVOD_AUTOTUNE=1 with no name ever coming round (unnamed calls only, each numbered): the
autotuner counts a step per 16,384 new names, so it samples and keeps only those names
(before, it kept every name, about 100 bytes per call without bound, and never sampled).
Args: the log path. Prints RANK <r> OK at the end."""
import csv
import sys

import mxnet as mx
import numpy as np

import mxhorovod as hvd

log_path = sys.argv[1]
hvd.init()
r, n = hvd.rank(), hvd.size()
x = mx.nd.ones((3,)) * (r + 1)
for k in range(3 * 16384 + 100):
    y = hvd.allreduce(x, op=hvd.Sum)
    if k % 1000 == 0:
        np.testing.assert_array_equal(y.asnumpy(), np.full((3,), n * (n + 1) / 2, "float32"))
mx.nd.waitall()
hvd.shutdown()
if r == 0:
    with open(log_path) as f:
        events = [row["event"] for row in csv.DictReader(f)]
    # One step per sample, no warmup: a sample per 16,384 calls.
    assert events.count("sample") >= 2, events
print("RANK %d OK" % r, flush=True)
