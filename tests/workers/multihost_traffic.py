"""One float32 Sum allreduce of MiB mebibytes (argv[1], default 16), checked on every rank:
the interface counters around this job show how many bytes each host sent and received.

With argv[2] "flat" or "hierarchical" (the data path this job takes), each rank also checks
the link pace (ops/link_pace.h): the ranks that wait on the link between hosts (every rank
when flat, the local roots when hierarchical) measured its rate from the allreduce and
pause for the time it takes to move 20 KB at that rate; the others measured nothing."""
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
path = sys.argv[2] if len(sys.argv) > 2 else ""
if path:
    rate, pause = _core.link_pace()
    if path == "flat" or hvd.local_rank() == 0:
        assert rate > 0, (r, path, rate)
        us = 20000 / rate * 1e6
        assert pause == (0 if us < 10 else min(1000, math.ceil(us))), (r, rate, pause)
    else:
        assert (rate, pause) == (0, 50), (r, path, rate, pause)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
