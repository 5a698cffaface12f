"""Calls of one name are matched in call order on every rank, whatever order the engine
runs them in: the n-th call of a name on a rank meets the n-th call of that name on the
others, and a call whose input is ready before the previous call of its name completed
waits for it (never refused, never matched with another call). Prints RANK <r> OK."""
import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
total = n * (n + 1) / 2  # sum of (r + 1) over ranks


def slow(x):
    """x after a few hundred milliseconds of engine work (its value unchanged)."""
    big = mx.nd.random.uniform(shape=(1200, 1200))
    return x + mx.nd.dot(big, big).sum() * 0


# Two calls of one name, different data; on odd ranks the first call's input comes last,
# so the engine runs the second call first there and not on even ranks.
first = mx.nd.ones(2) * (r + 1)
if r % 2 == 1:
    first = slow(first)
x = hvd.allreduce(first, op=hvd.Sum, name="dup")
y = hvd.allreduce(mx.nd.ones(2) * 10 * (r + 1), op=hvd.Sum, name="dup")
np.testing.assert_array_equal(x.asnumpy(), np.full(2, total, "float32"))
np.testing.assert_array_equal(y.asnumpy(), np.full(2, 10 * total, "float32"))

# The same with the roles of the ranks swapped, in place, and a grouped call taking the
# second turn of a name that a single call took first.
a = mx.nd.ones(3) * (r + 1)
if r % 2 == 0:
    a = slow(a)
hvd.allreduce_(a, op=hvd.Sum, name="g.0")
grp = [mx.nd.ones(3) * 2 * (r + 1), mx.nd.ones(4) * 3 * (r + 1)]
hvd.grouped_allreduce_(grp, op=hvd.Sum, name="g")  # names g.0 and g.1
np.testing.assert_array_equal(a.asnumpy(), np.full(3, total, "float32"))
np.testing.assert_array_equal(grp[0].asnumpy(), np.full(3, 2 * total, "float32"))
np.testing.assert_array_equal(grp[1].asnumpy(), np.full(4, 3 * total, "float32"))

# A metric averaged every step under one name, never waited for inside the loop (each
# step's input is a new array, ready at once): every result is its own step's.
outs = [hvd.allreduce(mx.nd.ones(3) * (r + 1) * k, op=hvd.Sum, name="metric")
        for k in range(40)]
for k, o in enumerate(outs):
    np.testing.assert_array_equal(o.asnumpy(), np.full(3, total * k, "float32"))

# Broadcasts of one name from different roots, the first one's input late on rank 0.
src = mx.nd.ones(2) * (r + 1)
if r == 0:
    src = slow(src)
b1 = hvd.broadcast(src, root_rank=0, name="bc")
b2 = hvd.broadcast(mx.nd.ones(2) * (r + 1), root_rank=n - 1, name="bc")
np.testing.assert_array_equal(b1.asnumpy(), np.full(2, 1, "float32"))
np.testing.assert_array_equal(b2.asnumpy(), np.full(2, n, "float32"))
print("RANK %d OK" % r, flush=True)
hvd.shutdown()
