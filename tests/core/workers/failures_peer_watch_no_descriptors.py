"""A rank that has used up its file descriptors waits for a peer that does not answer: the
peer watch (src/ops/peer_watch.h) cannot open the peer's /proc entry (EMFILE) and must take
it for running, not for ended (it aborted the job and SIGKILLed the live peer's process
group). Rank 1 stops itself (SIGSTOP, background thread included) for 4 s, longer than two
looks of the watch, while rank 0 waits for it in the negotiation; every rank checks the
sum. Prints RANK <r> OK."""
import errno
import os
import resource
import signal
import subprocess

import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
hvd.allreduce(mx.nd.ones((2,)), name="warm").asnumpy()
fds = []
if r == 0:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 16, hard))
    try:
        while True:
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        assert e.errno == errno.EMFILE, e
    try:
        open("/proc/self/stat").close()
        raise AssertionError("a descriptor was still free")
    except OSError as e:
        assert e.errno == errno.EMFILE, e
else:
    subprocess.Popen(["sh", "-c", "sleep 4; kill -CONT %d" % os.getpid()])
    os.kill(os.getpid(), signal.SIGSTOP)
out = hvd.allreduce(mx.nd.full((2,), r + 1), name="late", op=hvd.Sum).asnumpy()
for fd in fds:
    os.close(fd)
if r == 0:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
np.testing.assert_array_equal(out, np.full(2, n * (n + 1) / 2, np.float32))
print("RANK %d OK" % r, flush=True)
