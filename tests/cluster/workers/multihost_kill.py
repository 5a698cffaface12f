"""A rank that dies ends the job: argv[1] is the victim rank. Every rank runs allreduces;
after 3 steps the victim kills itself with SIGKILL (no clean-up of any kind) and the others
keep submitting for up to 60 s. The launcher must end them: a survivor that reaches the end
prints SURVIVED, which the test refuses."""
import os
import signal
import sys
import time

import mxnet as mx

import mxhorovod as hvd

victim = int(sys.argv[1])
hvd.init()
r = hvd.rank()
deadline = time.time() + 60
step = 0
try:
    while time.time() < deadline:
        if step == 3 and r == victim:
            print("RANK %d KILLS ITSELF" % r, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        hvd.allreduce(mx.nd.ones((1000,)), op=hvd.Sum, name="kill.%d" % (step % 4)).wait_to_read()
        step += 1
        time.sleep(0.05)
except mx.base.MXNetError as e:  # the library reports the lost peer; exit non-zero
    print("RANK %d ERROR after %d steps: %s" % (r, step, str(e).splitlines()[0]), flush=True)
    sys.exit(3)
print("RANK %d SURVIVED %d steps" % (r, step), flush=True)
