"""One float32 Sum allreduce of MiB mebibytes (argv[1], default 16), checked on every rank:
the interface counters around this job show how many bytes each host sent and received."""
import sys

import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
mib = int(sys.argv[1]) if len(sys.argv) > 1 else 16
count = (mib << 20) // 4
y = hvd.allreduce(mx.nd.ones((count,)) * (r + 1), op=hvd.Sum, name="traffic")
got = y.asnumpy()
assert got.shape == (count,) and np.all(got == n * (n + 1) / 2), (r, got[:4])
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
