"""Rank 1 forks a child after hvd.init() (as a DataLoader worker or os.fork does: it
inherits the launcher's connection, PMI_FD), then ends (argv[1]: 'os_exit' = os._exit(0),
'sigkill' = SIGKILL to itself) while the other ranks wait for it in an allreduce. The
child, with stdout and stderr closed, keeps the connection open for 60 s: mpirun (Hydra)
does not see rank 1 end and left the others waiting. Prints CHILD <pid> RANK1 PID <pid> (the test ends the child).
No rank prints RANK <r> OK: the survivors must end the job themselves."""
import os
import signal
import sys
import time

import mxnet as mx

import mxhorovod as hvd

hvd.init()
r = hvd.rank()
if r == 1:
    time.sleep(0.5)
    pid = os.fork()
    if pid == 0:
        os.close(1)
        os.close(2)
        time.sleep(60)
        os._exit(0)
    print("CHILD %d RANK1 PID %d" % (pid, os.getpid()), flush=True)
    if sys.argv[1] == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(0)
hvd.allreduce(mx.nd.ones((2,)), name="never").asnumpy()
print("RANK %d OK" % r, flush=True)
