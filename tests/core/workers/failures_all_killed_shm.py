"""Every rank of the job is SIGKILLed after init(), as an OOM killer or a node's health
check kills a job: no rank reaches MPI_Finalize or an abort. Each rank prints the MPICH
shared-memory files it maps as <path>; rank 0 then kills every rank, itself last. The test
checks that none of those files is left in /dev/shm."""
import os
import signal
import time

import mxnet as mx

import mxhorovod as hvd

hvd.init()
x = mx.nd.ones((4,))
hvd.allreduce_(x, name="warm")  # returns once the background thread runs its cycles
x.wait_to_read()
# A mapping whose name is gone reads "<path> (deleted)".
shm = sorted({line.split(None, 5)[5].strip().replace(" (deleted)", "")
              for line in open("/proc/self/maps") if "/dev/shm/mpich_shm_" in line})
print("WORKER %d SHM %s" % (hvd.rank(), " ".join("<%s>" % f for f in shm)), flush=True)
pids = hvd.allgather_object(os.getpid(), name="pids")
if hvd.rank() == 0:
    for pid in pids[1:]:
        os.kill(pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
