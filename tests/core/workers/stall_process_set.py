"""Stall inspector and timeline in a process set other than the global one (3 ranks, set
{0, 2}; argv[1] is the timeline file, HOROVOD_TIMELINE). HOROVOD_STALL_CHECK_TIME_SECONDS=1,
HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=6. Rank 2 is 3 s late for 'ps.late' in the set: rank 0
warns naming the set and rank 2 (job numbering), the operation then completes. Rank 0
waits on 'ps.never', which rank 2 never submits: past the shutdown time it fails on rank 0,
naming the set, and only it; mxhorovod keeps running (a set's stall cannot stop the job).
Prints RANK <r> OK at the end."""
import sys
import time

import mxnet as mx
import numpy as np
from mxnet.base import MXNetError

import mxhorovod as hvd

pair = hvd.ProcessSet([0, 2])
hvd.init(process_sets=[pair])
r, n = hvd.rank(), hvd.size()
assert n == 3

if pair.included():
    if r == 2:
        time.sleep(3.0)  # past two stall checks (1 s), 3 s before the stall shutdown (6 s)
    y = hvd.allreduce(mx.nd.ones((3,)) * (r + 1), op=hvd.Sum, name="ps.late", process_set=pair)
    np.testing.assert_array_equal(y.asnumpy(), np.full(3, 1 + 3, "float32"))
    if r == 0:
        z = hvd.allreduce(mx.nd.ones((2,)), name="ps.never", process_set=pair)
        try:
            z.asnumpy()
            raise AssertionError("no error for ps.never")
        except MXNetError as e:
            for needle in ("allreduce 'ps.never'", "process set 1 (ranks [0, 2])",
                           "missing ranks 2 (submitted by 1 of 2 ranks: 0)",
                           "failed its waiting operations", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=6.0"):
                assert needle in str(e), "expected %r in: %s" % (needle, e)
# The job goes on: the global set and the pair still work on every rank. (Rank 1 meets
# the others outside mxhorovod first: waiting 6 s in a global collective would be a stall
# of the global set, which the settings here turn into a shutdown.)
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
assert hvd.is_initialized()
t = hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name="global.after")
np.testing.assert_array_equal(t.asnumpy(), np.full(2, 3, "float32"))
if pair.included():
    u = hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name="ps.after", process_set=pair)
    np.testing.assert_array_equal(u.asnumpy(), np.full(2, 2, "float32"))
MPI.COMM_WORLD.Barrier()  # rank 1's shutdown would stop the pair's 'ps.after' (Horovod's rule)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
