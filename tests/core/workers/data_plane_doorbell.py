"""Waits on the doorbell (ops/mpi_wait.h): a rank that reaches a collective long before its
peers sleeps on it, and must wake with the right result whoever is late, through every
negotiation path (cached and uncached names), the cross-memory-attach handshakes (1 MiB)
and MPI (small), one call and grouped, with 2, 3 and 4 ranks (multi-round algorithms).
Argument: "default", or "off1" (rank 1 sets MXHOROVOD_DOORBELL=0: the host goes without it,
on timers, and the results are the same). Prints RANK <r> OK."""
import os
import sys
import time

case = sys.argv[1]
if case == "off1" and os.environ.get("PMI_RANK") == "1":
    os.environ["MXHOROVOD_DOORBELL"] = "0"

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

import mxhorovod as hvd  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
for late in [n - 1, 0]:
    for step in range(3):  # the first use of a name is negotiated in full, the others cached
        for elems in [64, 1 << 18]:
            if r == late:
                time.sleep(0.2)
            x = mx.nd.ones((elems,)) * (r + 1)
            ys = [mx.nd.ones((7,)) * (r + 1) * k for k in range(1, 4)]
            out = hvd.allreduce(x, op=hvd.Sum, name="late%d.%d" % (late, elems))
            outs = hvd.grouped_allreduce(ys, op=hvd.Sum, name="late%d.group.%d" % (late, elems))
            total = n * (n + 1) / 2
            assert np.all(out.asnumpy() == total), (r, late, step, elems, out.asnumpy()[:4])
            for k, o in enumerate(outs, 1):
                assert np.all(o.asnumpy() == total * k), (r, late, step, k, o.asnumpy())
# A broadcast whose root is late, then an allgather whose last rank is.
if r == 0:
    time.sleep(0.2)
b = hvd.broadcast(mx.nd.ones((5,)) * (r + 10), root_rank=0, name="late.bcast").asnumpy()
assert np.all(b == 10), (r, b)
if r == n - 1:
    time.sleep(0.2)
g = hvd.allgather(mx.nd.ones((r + 1, 2)) * r, name="late.gather").asnumpy()
assert g.shape == (n * (n + 1) // 2, 2) and g[-1, 0] == n - 1, (r, g)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
