"""/dev/shm full when hvd.init() makes the doorbell (run in a mount namespace with a small
tmpfs there, by test_core_multi.py): MPI starts first (mpi4py), then local rank 0 fills
/dev/shm to the last byte, then init(). The ranks go without a doorbell, on timers, with
the right results (before: the doorbell's sparse file was mapped and its first touch killed
every rank with SIGBUS). Prints RANK <r> OK."""
import errno
import os
import time

from mpi4py import MPI

world = MPI.COMM_WORLD
FILL = "/dev/shm/mxhorovod-test-fill"
if world.rank == 0:
    fd = os.open(FILL, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for size in [1 << 16, 4096, 1]:  # to the last byte
        try:
            while True:
                os.write(fd, b"\1" * size)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    os.close(fd)
world.Barrier()

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

import mxhorovod as hvd  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
for step in range(3):
    for elems in [64, 1 << 18]:
        if r == step % n:
            time.sleep(0.1)
        out = hvd.allreduce(mx.nd.ones((elems,)) * (r + 1), op=hvd.Sum, name="full.%d" % elems)
        assert np.all(out.asnumpy() == n * (n + 1) / 2), (r, step, elems, out.asnumpy()[:4])
hvd.shutdown()
assert not any(f.startswith("mxhorovod-bell-") for f in os.listdir("/dev/shm"))  # not even an empty one
world.Barrier()
if r == 0:
    os.unlink(FILL)
print("RANK %d OK" % r, flush=True)
