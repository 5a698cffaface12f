"""One rank reaches hvd.init() late (argv[1] seconds): the others wait for it, warning that
they wait (HOROVOD_STALL_CHECK_TIME_SECONDS, at least 30 s apart), then everything works.
Prints RANK <r> OK."""
import sys
import time

import mxnet as mx

import mxhorovod as hvd
from mpi4py import MPI

late = float(sys.argv[1])
if MPI.COMM_WORLD.Get_rank() == 1:
    time.sleep(late)
t0 = time.time()
hvd.init()
r, n = hvd.rank(), hvd.size()
got = hvd.allreduce(mx.nd.ones((3,)) * (r + 1), op=hvd.Sum, name="after.late").asnumpy()
assert (got == n * (n + 1) / 2).all(), (r, got)
print("RANK %d waited %.1f s in init" % (r, time.time() - t0), flush=True)
print("RANK %d OK" % r, flush=True)
