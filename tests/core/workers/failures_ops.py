"""One rank dies mid-training (argv[1]: 'exception', 'long_exception' (a 60 KB message, most
of a pipe's buffer, ending in END OF MESSAGE), 'sigterm', 'sigkill', 'segfault' or 'segfault_stuck' (MXNet's handler's exit() never ends) on rank argv[2]); the others keep training and would wait forever in the next allreduce. The test
checks that the job ends at once with a non-zero exit code and names the dead rank. No rank
may print RANK <r> OK."""
import ctypes
import os
import signal
import sys
import time

import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd

mode, victim = sys.argv[1], int(sys.argv[2])
hvd.init()
r = hvd.rank()
print("WORKER %d PID %d" % (r, os.getpid()), flush=True)
# MPICH's shared-memory files of this job: the test checks that a job ended by MPI_Abort or
# a rank's death does not leave them in /dev/shm.
# (init() unlinks their names soon after: a mapping then reads "<path> (deleted)".)
shm = sorted({line.split(None, 5)[5].strip().replace(" (deleted)", "")
              for line in open("/proc/self/maps") if "/dev/shm/mpich_shm_" in line})
print("WORKER %d SHM %s" % (r, " ".join("<%s>" % f for f in shm)), flush=True)

net = gluon.nn.Dense(4, in_units=8)
net.initialize(mx.init.Constant(0.1))
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.01})
x = mx.nd.ones((16, 8)) * (r + 1)
t0 = time.time()
step = 0
while time.time() - t0 < 600:  # bounded, far beyond the test's timeout
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    trainer.step(16)
    mx.nd.waitall()
    step += 1
    if r == victim and step == 5:
        print("WORKER %d DIES (%s) at step %d" % (r, mode, step), flush=True)
        if mode == "exception":
            raise RuntimeError("boom on rank %d" % r)
        if mode == "long_exception":
            raise RuntimeError("boom on rank %d: %s END OF MESSAGE" % (r, "x" * 60000))
        if mode == "segfault_stuck":
            # MXNet's SIGSEGV handler calls exit(); an exit handler that never returns (one
            # waiting on a lock another thread holds) kept the rank alive and the job hung.
            libc = ctypes.CDLL(None)
            libc.__cxa_atexit(ctypes.cast(libc.pause, ctypes.c_void_p), None, None)
        if mode.startswith("segfault"):
            ctypes.string_at(0)  # reads address 0: SIGSEGV (MXNet has its own handler too)
        os.kill(os.getpid(), signal.SIGTERM if mode == "sigterm" else signal.SIGKILL)
        time.sleep(30)
print("RANK %d OK" % r, flush=True)  # never reached: the job must end first
