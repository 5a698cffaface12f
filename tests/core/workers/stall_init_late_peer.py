"""One rank reaches hvd.init() late (argv[1] seconds): the others wait for it, warning that
they wait (HOROVOD_STALL_CHECK_TIME_SECONDS, at least 30 s apart), then everything works.
With argv[2] 'listed' (3 ranks): ranks 0 and 1 call hvd.init(comm=[0, 1]), rank 1 late, and
rank 2, not listed, hvd.init(comm=[2]) at once: rank 0 warns the same way, rank 2 is not
held up. With argv[2] 'no-mpi4py': mpi4py is not imported (it starts MPI at import), so
MPI starts in hvd.init(), whose MPI_Init_thread waits for the late rank: rank 0 warns there
(the rank from the launcher's PMI_RANK). Prints RANK <r> OK."""
import os
import sys
import time

import mxnet as mx

import mxhorovod as hvd

late = float(sys.argv[1])
listed = sys.argv[2:] == ["listed"]
if sys.argv[2:] == ["no-mpi4py"]:
    world_rank = int(os.environ["PMI_RANK"])
else:
    from mpi4py import MPI
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
