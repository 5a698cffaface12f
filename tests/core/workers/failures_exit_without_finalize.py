"""Rank 1 ends after hvd.init() without finalizing MPI, while rank 0 waits in a collective:
mpirun then kills rank 0 by SIGKILL, which prints nothing, and with exit code 0 the job
'succeeded' (exit 0, no line at all). Modes (argv[1]): 'os_exit' (os._exit(0)); 'raise' (an
unhandled exception: the excepthook reports it and calls MPI_Abort; the guard adds nothing).
Rank 0 never prints RANK 0 OK (it is killed); the test reads the guard's line."""
import os
import sys
import time

import mxnet as mx

import mxhorovod as hvd

hvd.init()
r = hvd.rank()
if r == 1:
    time.sleep(0.5)
    if sys.argv[1] == "os_exit":
        os._exit(0)
    raise RuntimeError("rank 1 fails")
hvd.allreduce(mx.nd.ones((2,)), name="never").asnumpy()
print("RANK %d OK" % r, flush=True)
