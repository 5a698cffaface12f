"""HOROVOD_AUTOTUNE=1: a loop of named allreduces (a training step's gradients) keeps giving
correct sums while the autotuner tries every candidate, and rank 0's log records each
sample and the best choice. Args: the log path. Prints RANK <r> OK at the end."""
import csv
import sys

import mxnet as mx
import numpy as np

import mxhorovod as hvd

log_path = sys.argv[1]
hvd.init()
r, n = hvd.rank(), hvd.size()
sizes = [3, 1000, 50000, 300000, 7]  # below and above the zero-copy candidates
for step in range(80):
    outs = [hvd.allreduce(mx.nd.ones((k,)) * (r + step), op=hvd.Sum, name="grad.%d" % i)
            for i, k in enumerate(sizes)]
    want = sum(q + step for q in range(n))
    for o in outs:
        got = o.asnumpy()
        assert np.all(got == want), (step, got[:3], want)
hvd.shutdown()
if r == 0:
    with open(log_path) as f:
        rows = list(csv.DictReader(f))
    events = [row["event"] for row in rows]
    assert events.count("sample") == 16, events
    assert events[-1] == "best", events
    best = rows[-1]
    samples = [row for row in rows if row["event"] == "sample"]
    assert float(best["score_bytes_per_sec"]) == max(float(s["score_bytes_per_sec"]) for s in samples)
    # Every grid value of every parameter was tried.
    assert {s["fusion_threshold_bytes"] for s in samples} >= {str(v << 20) for v in (4, 16, 64, 128)}
    assert {s["cycle_time_ms"] for s in samples} >= {"0.5", "1", "2", "5"}
    assert {s["slice_bytes"] for s in samples} >= {str(v << 20) for v in (1, 4, 16, 64)}
    assert {s["zero_copy_bytes"] for s in samples} >= {str(v << 10) for v in (16, 64, 256, 1024)}
print("RANK %d OK" % r, flush=True)
