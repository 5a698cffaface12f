"""One rank reaches hvd.init() late (argv[1] seconds): the others wait for it, warning that
they wait (HOROVOD_STALL_CHECK_TIME_SECONDS, at least 30 s apart), then everything works.
With argv[2] 'listed' (3 ranks): ranks 0 and 1 call hvd.init(comm=[0, 1]), rank 1 late, and
rank 2, not listed, hvd.init(comm=[2]) at once: rank 0 warns the same way, rank 2 is not
held up. Prints RANK <r> OK."""
import sys
import time

import mxnet as mx

import mxhorovod as hvd
from mpi4py import MPI

late = float(sys.argv[1])
listed = sys.argv[2:] == ["listed"]
world_rank = MPI.COMM_WORLD.Get_rank()
if world_rank == 1:
    time.sleep(late)
t0 = time.time()
hvd.init(comm=([0, 1] if world_rank < 2 else [2]) if listed else None)
r, n = hvd.rank(), hvd.size()
got = hvd.allreduce(mx.nd.ones((3,)) * (r + 1), op=hvd.Sum, name="after.late").asnumpy()
assert (got == n * (n + 1) / 2).all(), (r, got)
print("RANK %d waited %.1f s in init" % (world_rank, time.time() - t0), flush=True)
print("RANK %d OK" % world_rank, flush=True)
