"""The ranks' multiprocessing Pool workers (forked before hvd.init()) form the job: each
calls hvd.init() and an allreduce, and the pool ends at the end of its ``with`` block
(Pool.terminate(): SIGTERM to its waiting worker). The worker died of it without telling
mpirun that it finalized MPI, so mpirun killed the job's other ranks by SIGKILL, silently,
and exited 0. The last rank ends 2 s after the others, so that such a kill shows. Prints
RANK <r> OK."""
import multiprocessing as mp
import os
import time

import mxnet as mx

import mxhorovod as hvd

world_rank, world_size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])


def form_the_job(_):
    hvd.init()
    got = hvd.allreduce(mx.nd.ones((2,)) * hvd.rank(), op=hvd.Sum, name="pool").asnumpy()
    return hvd.rank(), float(got[0]), os.getpid()


with mp.get_context("fork").Pool(1) as pool:
    rank, value, pid = pool.map(form_the_job, [0])[0]
    workers = list(pool._pool)
for w in workers:
    w.join(30)
assert rank == world_rank and value == world_size * (world_size - 1) / 2, (rank, value)
assert pid != os.getpid()
if world_rank == world_size - 1:
    time.sleep(2)
print("RANK %d OK" % world_rank, flush=True)
