"""A rank whose whole process is stopped (SIGSTOP) for 6 s, then continued: rank 1 has a
shell stop it between two collectives (its background thread stops too, so the stall
inspector's tables never see it). With HOROVOD_STALL_CHECK_TIME_SECONDS=2 rank 0 warns
that it waits in the negotiation, repeats it, and says when the ranks answer again
(test_stall.py reads the lines); every result is right. Prints RANK <r> OK."""
import os
import subprocess
import time

import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
for step in range(8):
    if step == 3 and r == 1:
        pid = os.getpid()
        subprocess.Popen(["sh", "-c", "kill -STOP %d; sleep 6; kill -CONT %d" % (pid, pid)])
        time.sleep(0.5)  # stopped here
    out = hvd.allreduce(mx.nd.ones((1000,)) * (r + 1), op=hvd.Sum, name="step%d" % step)
    assert np.all(out.asnumpy() == n * (n + 1) / 2), (r, step, out.asnumpy()[:4])
print("RANK %d done" % r, flush=True)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
