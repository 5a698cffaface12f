"""A host's link goes down (argv[2] "down") or nearly so (argv[2] "slow": 1 Mbit/s) in the
middle of a job: argv[1] names the host whose eth0 the first rank on it takes down (``ip
link set eth0 down``, or ``tc`` capping it, in its own network namespace) after one
allreduce that all ranks complete. Then every rank calls a 16 MiB allreduce, which can
never finish: the transfer bound (MXHOROVOD_TRANSFER_*) must end the job with its error.
Prints ``LINK DOWN AT <time>`` (time.time()) on the rank that took it down; a rank that
gets its result prints ``SURVIVED``."""
import socket
import subprocess
import sys
import time

import mxnet as mx
import numpy as np

import mxhorovod as hvd

victim, how = sys.argv[1], sys.argv[2]
hvd.init()
r, n = hvd.rank(), hvd.size()
y = hvd.allreduce(mx.nd.ones((1 << 16,)) * (r + 1), op=hvd.Sum, name="link.warm")
assert np.all(y.asnumpy() == n * (n + 1) / 2), r
if socket.gethostname() == victim and hvd.local_rank() == 0:
    time.sleep(1.0)  # what the warm-up left in flight (this rank may finish first) arrives
    if how == "down":
        subprocess.run(["ip", "link", "set", "eth0", "down"], check=True)
    else:  # small messages (the negotiation) still pass; 16 MiB would take minutes
        subprocess.run(["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", "1mbit",
                        "burst", "32kb", "latency", "1s"], check=True)
    print("LINK DOWN AT %.3f" % time.time(), flush=True)
x = mx.nd.ones((4 << 20,))
hvd.allreduce_(x, op=hvd.Sum, name="link.big")
x.wait_to_read()
print("SURVIVED rank %d" % r, flush=True)
