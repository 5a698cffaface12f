"""One float32 Sum allreduce of MiB mebibytes (argv[1], default 16), checked on every rank:
the interface counters around this job show how many bytes each host sent and received.

With argv[2] "pace", each rank also checks the link pace (ops/link_pace.h): it measured the
link's rate from the allreduce (flat or hierarchical, local root or not) and pauses for the
time the link takes to move 20 KB at that rate."""
import math
import sys

import mxnet as mx
import numpy as np

import mxhorovod as hvd
from mxhorovod import _core

hvd.init()
r, n = hvd.rank(), hvd.size()
mib = int(sys.argv[1]) if len(sys.argv) > 1 else 16
count = (mib << 20) // 4
y = hvd.allreduce(mx.nd.ones((count,)) * (r + 1), op=hvd.Sum, name="traffic")
got = y.asnumpy()
assert got.shape == (count,) and np.all(got == n * (n + 1) / 2), (r, got[:4])
if sys.argv[2:] == ["pace"]:
    rate, pause = _core.link_pace()
    assert rate > 0, (r, rate)
    us = 20000 / rate * 1e6
    assert pause == (0 if us < 10 else min(1000, math.ceil(us))), (r, rate, pause)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
