"""MPI started by mpi4py before hvd.init(); argv[1]:

- 'raise': the last rank fails with an unhandled exception before init(). Its exit waited
  in mpi4py's MPI_Finalize for the others, which waited in init() for it: a hang. Now
  mxhorovod's pre-init excepthook names the rank and ends the job (MPI_Abort) at once.
- 'child': each rank forks a child (a worker process) whose exception reaches
  sys.excepthook: only the traceback, no MPI_Abort from the child (it is not the rank); it
  ends with os._exit, as multiprocessing's workers do (a forked child of an mpi4py process
  that exits normally runs MPI_Finalize there, which breaks the job without mxhorovod too).
  The ranks go on, init() and reduce. Prints RANK <r> OK."""
import os
import sys

from mpi4py import MPI

import mxhorovod as hvd

mode = sys.argv[1]
world_rank, world_size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
if mode == "raise":
    if world_rank == world_size - 1:
        raise RuntimeError("a script failing on rank %d before hvd.init()" % world_rank)
elif mode == "child":
    pid = os.fork()
    if pid == 0:
        try:
            raise RuntimeError("a worker process of rank %d failing" % world_rank)
        except RuntimeError:
            sys.excepthook(*sys.exc_info())
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1, status
else:
    raise SystemExit("unknown mode " + mode)

import mxnet as mx  # noqa: E402

hvd.init()
y = hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name="after")
assert y.asnumpy().tolist() == [world_size] * 2, y
print("RANK %d OK" % hvd.rank(), flush=True)
