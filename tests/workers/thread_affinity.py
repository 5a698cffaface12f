"""HOROVOD_THREAD_AFFINITY: prints "BG <rank> <cores>", the cores its background thread
(named mxhorovod-bg) may run on, from /proc/self/task/*/status; then an allreduce with the
right result. Prints RANK <r> OK."""
import os

import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
out = hvd.allreduce(mx.nd.ones((1 << 16,)) * (r + 1), op=hvd.Sum, name="affinity")
assert np.all(out.asnumpy() == n * (n + 1) / 2), (r, out.asnumpy()[:4])
for tid in os.listdir("/proc/self/task"):
    with open("/proc/self/task/%s/comm" % tid) as f:
        if f.read().strip() != "mxhorovod-bg":
            continue
    with open("/proc/self/task/%s/status" % tid) as f:
        allowed = [line.split()[1] for line in f if line.startswith("Cpus_allowed_list:")][0]
    print("BG %d %s" % (r, allowed), flush=True)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
