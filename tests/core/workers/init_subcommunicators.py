"""init(comm=...) with mpi4py sub-communicators and rank lists, mpi4py used beside the
library in the same process, and init() again on the whole world afterwards (4 ranks).
The sub-jobs make different numbers of unnamed calls (allreduce, broadcast_object): the
whole world's unnamed calls afterwards still meet (their numbers start from 0 again when a
session has other ranks than the last; before, they went on from each sub-job's count and
every rank waited forever)."""
import mxnet as mx
import numpy as np
from mpi4py import MPI

import mxhorovod as hvd

world = MPI.COMM_WORLD
wr, wn = world.Get_rank(), world.Get_size()
assert wn == 4

# Two jobs side by side: even and odd world ranks, each its own mxhorovod world.
sub = world.Split(color=wr % 2, key=wr)
hvd.init(comm=sub)
assert (hvd.rank(), hvd.size()) == (sub.Get_rank(), 2)
y = hvd.allreduce(mx.nd.array([wr], dtype="int32"), op=hvd.Sum, name="sub")
# mpi4py on the world communicator while our operation may be in flight.
assert world.allreduce(wr) == sum(range(wn))
want = sum(r for r in range(wn) if r % 2 == wr % 2)
assert y.asnumpy().tolist() == [want], (y.asnumpy(), want)
for k in range(3 if wr % 2 == 0 else 1):  # unnamed: numbered 0, 1, 2 on even ranks, 0 on odd
    u = hvd.allreduce(mx.nd.array([k + wr], dtype="int32"), op=hvd.Sum)
    assert u.asnumpy().tolist() == [2 * k + want], (k, u.asnumpy())
assert hvd.broadcast_object(wr, root_rank=1) == (3 if wr % 2 else 2)
hvd.shutdown()
sub.Free()

# A rank list: only ranks 0..2 take part; rank 3 keeps using mpi4py alone.
if wr < 3:
    hvd.init(comm=[0, 1, 2])
    assert hvd.size() == 3 and hvd.rank() == wr
    g = hvd.allgather(mx.nd.array([[wr]]), name="three").asnumpy()
    assert g.ravel().tolist() == [0, 1, 2], g
    assert hvd.allgather_object(wr) == [0, 1, 2]
    hvd.shutdown()
world.Barrier()

# The whole world again, after the shutdowns above.
hvd.init()
assert hvd.size() == 4 and hvd.rank() == wr
z = hvd.broadcast(mx.nd.array([wr * 10.0]), root_rank=3, name="again")
np.testing.assert_array_equal(z.asnumpy(), [30.0])
# Unnamed calls of the whole world, after sessions of different ranks: they meet.
u = hvd.allreduce(mx.nd.array([wr], dtype="int32"), op=hvd.Sum)
assert u.asnumpy().tolist() == [sum(range(wn))], u.asnumpy()
assert hvd.broadcast_object("from %d" % wr, root_rank=2) == "from 2"
assert hvd.allgather_object(wr) == list(range(wn))
hvd.shutdown()
print("RANK %d OK" % wr, flush=True)
