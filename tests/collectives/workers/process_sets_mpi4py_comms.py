"""Process sets made from mpi4py communicators, on 4 ranks, values checked on every rank:
1. Horovod's documented pattern: Split(color=MPI.UNDEFINED for ranks 0, 1), so ranks 0 and
   1 pass ProcessSet(MPI.COMM_NULL) (was an mpi4py exception there and a hang elsewhere);
2. the same through add_process_set with dynamic process sets;
3. init(comm=...) on world ranks 1, 2, 3 and a set of world ranks 1, 2: the set is job
   ranks [0, 1] (was world ranks [1, 2]: a mismatch error, or a hang)."""
import mxnet as mx
from mpi4py import MPI

import mxhorovod as hvd

world = MPI.COMM_WORLD
w = world.rank
assert world.size == 4


def total(ps, name, value):
    y = hvd.allreduce(mx.nd.ones(1) * value, op=hvd.Sum, name=name, process_set=ps)
    return y.asscalar()


# 1. At init.
sub = world.Split(MPI.UNDEFINED if w in (0, 1) else 1, w)
ps = hvd.ProcessSet(sub)
hvd.init(world, process_sets=[ps])
assert ps.ranks == [2, 3], ps.ranks
assert ps.included() == (w in (2, 3)) and ps.process_set_id == 1, (ps.included(), ps)
if w in (2, 3):
    assert total(ps, "s1", w) == 5
assert total(hvd.global_process_set, "g1", 1) == 4
hvd.shutdown()

# 2. Added after init.
hvd.init(process_sets="dynamic")
odd = world.Split(1 if w % 2 else MPI.UNDEFINED, w)
ps2 = hvd.add_process_set(hvd.ProcessSet(odd))
assert ps2.ranks == [1, 3] and ps2.included() == (w % 2 == 1), ps2
if w % 2:
    assert total(ps2, "s2", w) == 4
assert total(hvd.global_process_set, "g2", 1) == 4
hvd.shutdown()

# 3. A job that is not COMM_WORLD.
job = world.Split(0 if w > 0 else MPI.UNDEFINED, w)
if w > 0:
    pair = job.Split(0 if job.rank < 2 else MPI.UNDEFINED, job.rank)
    ps3 = hvd.ProcessSet(pair)
    hvd.init(comm=job, process_sets=[ps3])
    assert ps3.ranks == [0, 1], ps3.ranks
    if ps3.included():
        assert total(ps3, "s3", w) == 3  # world ranks 1 + 2
    assert total(hvd.global_process_set, "g3", 1) == 3
    hvd.shutdown()
print("RANK %d OK" % w, flush=True)
