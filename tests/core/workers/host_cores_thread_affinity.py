"""HOROVOD_THREAD_AFFINITY: prints "BG <rank> <cores>", the cores its background thread
(named mxhorovod-bg) may run on, from /proc/self/task/*/status; then an allreduce with the
right result. Prints RANK <r> OK; or, when init() refuses the setting, REFUSED <rank>: <error>
on every rank, and exits with 3."""
import os

import mxnet as mx
import numpy as np

import mxhorovod as hvd

try:
    hvd.init()
except hvd.InvalidArgumentError as e:
    # A refused setting: said on every rank before any rank ends the job (an unhandled
    # error's MPI_Abort on one rank could cut the other's output short).
    print("REFUSED rank %s: %s" % (os.environ.get("PMI_RANK"), e), flush=True)
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
    raise SystemExit(3)
r, n = hvd.rank(), hvd.size()
out = hvd.allreduce(mx.nd.ones((1 << 16,)) * (r + 1), op=hvd.Sum, name="affinity")
assert np.all(out.asnumpy() == n * (n + 1) / 2), (r, out.asnumpy()[:4])
for tid in os.listdir("/proc/self/task"):
    with open("/proc/self/task/%s/comm" % tid) as f:
        if f.read().strip() != "mxhorovod-bg":
            continue
    with open("/proc/self/task/%s/status" % tid) as f:
        allowed = [line.split()[1] for line in f if line.startswith("Cpus_allowed_list:")][0]
    print("BG %d %s" % (r, allowed), flush=True)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
