"""Process sets, reducescatter and grouped allgather/reducescatter on every rank, against
numpy on the inputs of all ranks (each rank regenerates every rank's input). Run with
HOROVOD_DYNAMIC_PROCESS_SETS=1 on 2, 3 or 4 ranks. Prints RANK <r> OK at the end."""
import numpy as np
import mxnet as mx
from mxnet.base import MXNetError
from mpi4py import MPI

import mxhorovod as hvd

world = MPI.COMM_WORLD
n = world.Get_size()
even = hvd.ProcessSet(range(0, n, 2))
odd = hvd.ProcessSet(range(1, n, 2))
hvd.init(process_sets=[even, odd])
r = hvd.rank()
assert (even.process_set_id, odd.process_set_id) == (1, 2), (even, odd)
assert hvd.global_process_set.process_set_id == 0 and hvd.global_process_set.size() == n
mine, other = (even, odd) if r % 2 == 0 else (odd, even)
assert mine.included() and not other.included()
assert mine.rank() == mine.ranks.index(r) and other.rank() is None
assert mine.size() == len(mine.ranks) and other.size() == len(other.ranks)


def data(rank, shape, dtype, seed):
    rng = np.random.RandomState(seed * 100 + rank)
    if dtype.startswith("float"):
        return rng.uniform(-2, 2, size=shape).astype(dtype)
    return rng.randint(-50, 50, size=shape).astype(dtype)


def close(got, want, what, tol=1e-5):
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want).astype(np.float64),
                               rtol=tol, atol=tol, err_msg=what)


def expect_raise(exc, needles, fn, *args, **kwargs):
    try:
        out = fn(*args, **kwargs)
        if isinstance(out, mx.nd.NDArray):
            out.asnumpy()
        elif isinstance(out, list):
            [o.asnumpy() for o in out]
    except exc as e:
        for s in needles:
            assert s in str(e), "expected %r in: %s" % (s, e)
        return
    raise AssertionError("no %s raised; wanted %s" % (exc.__name__, needles))


def rows(total, size, k):
    return total // size + (1 if k < total % size else 0)


def check_set(ps, tag, seed):
    """Every collective within ps, values from the set's ranks only."""
    members, k, m = ps.ranks, ps.rank(), ps.size()
    xs = [data(g, (4, 3), "float32", seed) for g in members]
    x = mx.nd.array(xs[k])
    close(hvd.allreduce(x, op=hvd.Sum, name=tag + ".sum", process_set=ps).asnumpy(),
          np.sum(xs, axis=0), tag + " sum")
    close(hvd.allreduce(x, name=tag + ".avg", process_set=ps).asnumpy(), np.mean(xs, axis=0),
          tag + " average")
    g = hvd.grouped_allreduce([x, x * 2], op=hvd.Max, name=tag + ".grp", process_set=ps)
    close(g[1].asnumpy(), np.max(xs, axis=0) * 2, tag + " grouped max")
    for k_root, root in enumerate(members):  # root_rank is a job rank (as Horovod)
        b = hvd.broadcast(x, root, name="%s.bc%d" % (tag, root), process_set=ps)
        close(b.asnumpy(), xs[k_root], tag + " broadcast root %d" % root)
    # broadcast_object from the set's last member, by its job rank.
    got = hvd.broadcast_object(("from", members[-1]) if r == members[-1] else None,
                               root_rank=members[-1], name=tag + ".bo", process_set=ps)
    assert got == ("from", members[-1]), (tag, got)
    # allgather with a different dim 0 per rank, in set order.
    ys = [data(g, (1 + g, 2), "int32", seed + 1) for g in members]
    got = hvd.allgather(mx.nd.array(ys[k], dtype="int32"), name=tag + ".ag", process_set=ps)
    np.testing.assert_array_equal(got.asnumpy(), np.concatenate(ys))
    # alltoall with splits: rank i sends (i + j) % 2 + 1 rows to rank j.
    splits = [[(i + j) % 2 + 1 for j in range(m)] for i in range(m)]
    zs = [data(g, (sum(splits[i]), 2), "float64", seed + 2) for i, g in enumerate(members)]
    out, recv = hvd.alltoall(mx.nd.array(zs[k], dtype="float64"),
                             splits=np.array(splits[k], dtype=np.int32), name=tag + ".a2a",
                             process_set=ps)
    want = []
    for i in range(m):
        start = sum(splits[i][:k])
        want.append(zs[i][start:start + splits[i][k]])
    close(out.asnumpy(), np.concatenate(want), tag + " alltoall", 1e-12)
    np.testing.assert_array_equal(recv.asnumpy(), [splits[i][k] for i in range(m)])
    # reducescatter within the set.
    total = 2 * m + 1
    ws = [data(g, (total, 3), "float32", seed + 3) for g in members]
    rs = hvd.reducescatter(mx.nd.array(ws[k]), op=hvd.Sum, name=tag + ".rs", process_set=ps)
    first = sum(rows(total, m, q) for q in range(k))
    close(rs.asnumpy(), np.sum(ws, axis=0)[first:first + rows(total, m, k)], tag + " reducescatter")


check_set(hvd.global_process_set, "global", 1)
check_set(mine, "mine", 11)

# reducescatter: every dtype, Sum and Average, scale factors, uneven and short dim 0.
for seed, (dtype, op, total) in enumerate([("float32", hvd.Average, 7), ("float64", hvd.Sum, 1),
                                            ("int32", hvd.Sum, n + 2), ("int64", hvd.Average, 5),
                                            ("float16", hvd.Sum, 2 * n)]):
    xs = [data(g, (total, 2, 2), dtype, 50 + seed) for g in range(n)]
    got = hvd.reducescatter(mx.nd.array(xs[r], dtype=dtype), op=op, name="rs.%s" % dtype,
                            prescale_factor=1.0, postscale_factor=1.0)
    s = np.sum(np.stack(xs).astype(np.float64), axis=0)
    want = s if op == hvd.Sum else (s / n if dtype.startswith("float") else np.trunc(s / n))
    first = sum(rows(total, n, q) for q in range(r))
    assert got.shape == (rows(total, n, r), 2, 2) and got.dtype == np.dtype(dtype), got.shape
    close(got.asnumpy(), want[first:first + rows(total, n, r)], "reducescatter " + dtype,
          2e-2 if dtype == "float16" else 1e-5)
# scale factors: prescale on each input, postscale on the result.
xs = [data(g, (n, 3), "float64", 70) for g in range(n)]
got = hvd.reducescatter(mx.nd.array(xs[r], dtype="float64"), op=hvd.Sum, name="rs.scaled",
                        prescale_factor=0.5, postscale_factor=3.0)
close(got.asnumpy(), (np.sum(xs, axis=0) * 1.5)[r:r + 1], "reducescatter scaled", 1e-12)
# grouped reducescatter of different shapes (one fused call) and grouped allgather.
a = [data(g, (n + 1, 2), "float32", 80) for g in range(n)]
b = [data(g, (3 * n, 4, 1), "float32", 81) for g in range(n)]
ga, gb = hvd.grouped_reducescatter([mx.nd.array(a[r]), mx.nd.array(b[r])], op=hvd.Sum,
                                   name="grs")
fa = sum(rows(n + 1, n, q) for q in range(r))
close(ga.asnumpy(), np.sum(a, axis=0)[fa:fa + rows(n + 1, n, r)], "grouped reducescatter a")
close(gb.asnumpy(), np.sum(b, axis=0)[3 * r:3 * r + 3], "grouped reducescatter b")
c = [data(g, (g + 1, 3), "float32", 82) for g in range(n)]
d = [data(g, (2 * n - g, 1), "int64", 83) for g in range(n)]
gc, gd = hvd.grouped_allgather([mx.nd.array(c[r]), mx.nd.array(d[r], dtype="int64")], name="gag")
close(gc.asnumpy(), np.concatenate(c), "grouped allgather c")
np.testing.assert_array_equal(gd.asnumpy(), np.concatenate(d))

# Bad input at the call.
expect_raise(ValueError, ["0-d", "scalar"], hvd.reducescatter, mx.np.array(3.0))
expect_raise(ValueError, ["only hvd.Sum and hvd.Average", "Max"], hvd.reducescatter, mx.nd.ones((n,)), op=hvd.Max)
expect_raise(ValueError, ["Adasum"], hvd.reducescatter, mx.nd.ones((n,)), op=hvd.Adasum)
expect_raise(ValueError, ["not in process set %d" % other.process_set_id, str(r)],
             hvd.allreduce, mx.nd.ones((2,)), process_set=other)
expect_raise(ValueError, ["not registered"], hvd.allreduce, mx.nd.ones((2,)),
             process_set=hvd.ProcessSet([0]))
expect_raise(TypeError, ["ProcessSet"], hvd.allreduce, mx.nd.ones((2,)), process_set=[0, 1])
# A root that is a job rank outside the set (for odd ranks with n >= 2: rank 0; for even
# ranks: rank 1) is refused at the call, naming the set's ranks.
expect_raise(ValueError, ["root_rank %d" % other.ranks[0], "is not a rank of process set",
                          str(mine.ranks)], hvd.broadcast, mx.nd.ones((2,)), other.ranks[0],
             process_set=mine)
expect_raise(ValueError, ["root_rank %d" % n], hvd.broadcast, mx.nd.ones((2,)), n)
# Shapes that differ between ranks: the error names the tensor and both shapes, everywhere.
expect_raise(MXNetError, ["rs.mismatch", "shapes", "rank 0 has (3,)"], hvd.reducescatter,
             mx.nd.ones((3,) if r == 0 else (4,)), name="rs.mismatch")

# A set never waits for a rank outside it: rank 0 holds rank n-1 in an mpi4py receive until
# the set {0, ..., n-2} has finished an allreduce (a deadlock if the set needed rank n-1).
if n >= 3:
    head = hvd.add_process_set(list(range(n - 1)))
    if r < n - 1:
        y = hvd.allreduce(mx.nd.ones((2,)) * r, op=hvd.Sum, name="head", process_set=head)
        close(y.asnumpy(), np.full(2, sum(range(n - 1))), "head set")
        if r == 0:
            world.send("done", dest=n - 1, tag=7)
    else:
        assert world.recv(source=0, tag=7) == "done"
        assert head.included() is False and head.rank() is None
    hvd.remove_process_set(head)
    assert head.process_set_id is None

# DistributedOptimizer within a set averages over the set only.
opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=1.0), process_set=mine)
w = mx.nd.zeros((2,))
grad = mx.nd.ones((2,)) * r
opt.update(0, w, grad, None)
close(w.asnumpy(), -np.full(2, np.mean(mine.ranks)), "optimizer in a set")

# Dynamic sets: add on every rank, use, remove; errors on every rank.
expect_raise(ValueError, ["already exists (id 0)"], hvd.add_process_set, list(range(n)))
if n == 2:  # every subset of 2 ranks exists already: make room
    assert hvd.remove_process_set(odd) is True and odd.process_set_id is None
    target, left = [1], [0, 1]
else:
    target, left = [0, 1], [0, 1, 2]
pair = hvd.add_process_set(hvd.ProcessSet(target))
pair_id = pair.process_set_id
assert pair_id not in (None, 0, 1, 2)
if pair.included():
    y = hvd.allreduce(mx.nd.ones((3,)) * (r + 1), op=hvd.Sum, name="pair", process_set=pair)
    close(y.asnumpy(), np.full(3, sum(g + 1 for g in target)), "dynamic pair")
expect_raise(ValueError, ["already exists"], hvd.add_process_set, target)
expect_raise(ValueError, ["registered before"], hvd.add_process_set, pair)
assert hvd.remove_process_set(pair) is True
assert hvd.remove_process_set(pair) is False
expect_raise(ValueError, ["not registered"], hvd.allreduce, mx.nd.ones((2,)), process_set=pair)
assert hvd.remove_process_set(hvd.global_process_set) is False  # as in Horovod
expect_raise(ValueError, ["listed twice"], hvd.ProcessSet, [0, 0])
expect_raise(ValueError, ["not a rank of this job"], hvd.add_process_set, [0, n])
# Ranks that disagree: every rank gets the error, naming both requests; nothing is added.
expect_raise(ValueError, ["the ranks disagree", "rank 0 asks for (0,)"], hvd.add_process_set,
             [0] if r == 0 else [r])
assert [e[0] for e in hvd._core.process_sets()] == left
# Re-adding a removed set works; the id is new.
again = hvd.add_process_set(target)
assert again.process_set_id > pair_id and again.size() == len(target)
hvd.remove_process_set(again)

# init() again while running does nothing (Horovod's rule), and says so when it is given
# sets this session lacks (before, silently: the set was 'not registered' at its first
# collective, although the script had passed it to init()); the same sets again are quiet.
import warnings  # noqa: E402
now = [list(e[1]) for e in hvd._core.process_sets() if e[0] != 0]
late = hvd.ProcessSet(next(c for c in ([k] for k in range(n)) if c not in now))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    hvd.init()
    hvd.init(process_sets=[hvd.ProcessSet(ranks) for ranks in now])
    assert not caught, [str(w.message) for w in caught]
    hvd.init(process_sets=[late])
assert late.process_set_id is None, late
assert len(caught) == 1 and "does nothing: the process sets (ranks %s) are not registered" \
    % (late.ranks,) in str(caught[0].message), [str(w.message) for w in caught]
expect_raise(ValueError, ["not registered"], hvd.allreduce, mx.nd.ones(1), process_set=late)

# Still healthy.
y = hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name="final")
close(y.asnumpy(), np.full(2, n), "final")
hvd.shutdown()
assert even.size() is None  # not running
print("RANK %d OK" % r, flush=True)
