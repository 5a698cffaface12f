"""A rank whose script handles fatal signals (Python handlers set before hvd.init()) and is
sent them (os.kill) goes on: mxhorovod's crash report called it dying ("got SIGABRT; it
dies of it") and its watchdog ended it 10 s later (exit 134; or 135 for SIGBUS), and with
it the job. argv[1:]: the signals' names (SIGABRT, SIGBUS, SIGFPE), each handled and sent
in turn. Rank 1 is sent them, then every rank runs collectives for 12 s (past the
watchdog's 10 s) and checks their values. Prints RANK <r> OK."""
import os
import signal
import sys
import time

import mxnet as mx

sigs = [getattr(signal, name) for name in sys.argv[1:]]
handled = []
for sig in sigs:
    signal.signal(sig, lambda s, frame: handled.append(s))

import mxhorovod as hvd  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
if r == 1:
    for i, sig in enumerate(sigs):
        os.kill(os.getpid(), sig)
        while len(handled) <= i:  # Python runs the handler at its next bytecode
            time.sleep(0.01)
    assert handled == sigs, handled
step = 0
start = time.monotonic()
while time.monotonic() - start < 12:  # the watchdog's 10 s, and some
    got = hvd.allreduce(mx.nd.ones((2,)) * (r + 1), op=hvd.Sum, name="s%d" % step).asnumpy()
    assert (got == n * (n + 1) / 2).all(), (step, got)
    step += 1
    time.sleep(0.2)
print("RANK %d OK" % r, flush=True)
