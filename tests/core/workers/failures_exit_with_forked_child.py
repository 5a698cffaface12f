"""Rank 1 forks a child after hvd.init() (as a DataLoader worker or os.fork does: it
inherits the launcher's connection, PMI_FD), then ends while the other ranks wait for it:
argv[1] 'os_exit' (os._exit(0)) or 'sigkill' (SIGKILL to itself), the others in an
allreduce; 'killed_in_broadcasts': every rank broadcasts 200 MB again and again (the data
calls, which were MPI's blocking MPI_Bcast by default until 2026-12-03: the survivors hung
there) and the child SIGKILLs rank 1 after 1.5 s. The child, with stdout and stderr closed,
keeps the connection open for 60 s: mpirun (Hydra) does not see rank 1 end and left the
others waiting. Prints CHILD <pid> RANK1 PID <pid> (the test ends the child). No rank
prints RANK <r> OK: the survivors must end the job themselves."""
import os
import signal
import sys
import time

import mxnet as mx

import mxhorovod as hvd

hvd.init()
r, mode = hvd.rank(), sys.argv[1]
if r == 1:
    time.sleep(0.5)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(1)
        os.close(2)
        if mode == "killed_in_broadcasts":
            time.sleep(1.5)
            os.kill(parent, signal.SIGKILL)
        time.sleep(60)
        os._exit(0)
    print("CHILD %d RANK1 PID %d" % (pid, parent), flush=True)
    if mode == "sigkill":
        os.kill(parent, signal.SIGKILL)
    elif mode == "os_exit":
        os._exit(0)
if mode == "killed_in_broadcasts":
    a = mx.nd.ones((50_000_000,))
    for i in range(100_000):
        hvd.broadcast_(a, root_rank=0, name="b%d" % (i % 3))
        a.wait_to_read()
else:
    hvd.allreduce(mx.nd.ones((2,)), name="never").asnumpy()
print("RANK %d OK" % r, flush=True)
