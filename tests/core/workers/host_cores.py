"""Collectives under whatever cores the launch gives (the test runs it under `taskset` or in
a cgroup with a CPU quota, where the background thread must choose the waits of ranks that
share a core): small and 1 MiB allreduces, a broadcast, with the right results. The test
reads the core's "this host: ..." debug line. Prints RANK <r> OK."""
import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
for step in range(3):
    for elems in (16, 1 << 18):
        out = hvd.allreduce(mx.nd.ones((elems,)) * (r + 1), op=hvd.Sum, name="cores.%d" % elems)
        assert np.all(out.asnumpy() == n * (n + 1) / 2), (r, step, elems, out.asnumpy()[:4])
b = hvd.broadcast(mx.nd.ones((5,)) * (r + 10), root_rank=n - 1, name="cores.bcast").asnumpy()
assert np.all(b == n + 9), (r, b)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
