"""Every collective, dtype and op on every rank, against numpy on the inputs of all ranks
(each rank regenerates every rank's input from a seed, so the expectation is independent
of the library). Prints RANK <r> OK at the end."""
import socket

import mxnet as mx
import numpy as np

import mxhorovod as hvd
from support.topology import check_topology

hvd.init()
r, n = hvd.rank(), hvd.size()
DTYPES = ["float16", "float32", "float64", "uint8", "int8", "int32", "int64"]
OPS = {hvd.Sum: "sum", hvd.Average: "avg", hvd.Min: "min", hvd.Max: "max", hvd.Product: "prod"}


def data(rank, shape, dtype, seed, small=False):
    rng = np.random.RandomState(seed * 100 + rank)
    if dtype.startswith("float"):
        return rng.uniform(-2, 2, size=shape).astype(dtype)
    hi = 2 if small else (5 if dtype in ("uint8", "int8") else 1000)
    lo = 0 if dtype == "uint8" else -hi
    return rng.randint(lo, hi + 1, size=shape).astype(dtype)


def expect(op, xs, dtype):
    if op == hvd.Sum:
        return np.sum(np.stack(xs).astype(np.float64), axis=0).astype(dtype)
    if op == hvd.Average:
        s = np.sum(np.stack(xs).astype(np.float64), axis=0)
        return np.trunc(s / n).astype(dtype) if not dtype.startswith("float") else (s / n).astype(dtype)
    if op == hvd.Min:
        return np.min(np.stack(xs), axis=0)
    if op == hvd.Max:
        return np.max(np.stack(xs), axis=0)
    return np.prod(np.stack(xs).astype(np.float64), axis=0).astype(dtype)


def close(got, want, dtype, what):
    tol = {"float16": 2e-2, "float32": 1e-5, "float64": 1e-12}.get(dtype, 0)
    assert got.dtype == np.dtype(dtype), (what, got.dtype)
    if tol:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                   atol=tol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


# Every dtype x op, out of place and in place; all submitted before any is read.
results = []
seed = 0
for dtype in DTYPES:
    for op in OPS:
        seed += 1
        shape = (3, 5)
        small = op == hvd.Product
        xs = [data(k, shape, dtype, seed, small) for k in range(n)]
        x = mx.nd.array(xs[r], dtype=dtype)
        y = hvd.allreduce(x, op=op, name="ar.%s.%s" % (dtype, OPS[op]))
        z = hvd.allreduce_(mx.nd.array(xs[r], dtype=dtype), op=op, name="ari.%s.%s" % (dtype, OPS[op]))
        results.append((y, z, x, expect(op, xs, dtype), xs[r], dtype, OPS[op]))
for y, z, x, want, mine, dtype, opname in results:
    close(y.asnumpy(), want, dtype, "allreduce %s %s" % (dtype, opname))
    close(z.asnumpy(), want, dtype, "allreduce_ %s %s" % (dtype, opname))
    close(x.asnumpy(), mine, dtype, "input untouched %s %s" % (dtype, opname))

# prescale / postscale, float and integer (integer scaling truncates like Horovod's).
xs = [data(k, (4,), "float32", 77) for k in range(n)]
y = hvd.allreduce(mx.nd.array(xs[r]), op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name="scaled")
close(y.asnumpy(), (np.sum([0.5 * v for v in xs], axis=0) * 3.0).astype("float32"), "float32", "scaled")
yi = hvd.allreduce(mx.nd.array([7, -7, 5], dtype="int32"), op=hvd.Average, name="int.avg")
close(yi.asnumpy(), np.trunc(np.array([7, -7, 5]) * n / n).astype("int32"), "int32", "int avg")
yi = hvd.allreduce(mx.nd.array([r + 1], dtype="int32"), op=hvd.Average, name="int.avg2")
close(yi.asnumpy(), np.array([int(sum(range(1, n + 1)) / n)], dtype="int32"), "int32", "int avg trunc")
# Integer scaling by a factor as Horovod computes it: x as double times the factor (for
# Average, postscale / size), rounded to double, truncated. 9 * (1/3) is 3 there; the exact
# product of 9 and the double nearest 1/3 (2.99999999999999994...) truncated to 2 before.
iv = np.array([621, 9, -57, 300, 3, -3])
third = np.float64(1) / 3
hv = lambda v, f: np.trunc(np.asarray(v, dtype=np.float64) * np.float64(f))  # noqa: E731
for dtype in ("int32", "int64"):
    yi = hvd.allreduce(mx.nd.array(iv, dtype=dtype), op=hvd.Sum, prescale_factor=1 / 3, name="pre3." + dtype)
    close(yi.asnumpy(), (n * hv(iv, third)).astype(dtype), dtype, "prescale 1/3 " + dtype)
    yi = hvd.allreduce(mx.nd.array(iv, dtype=dtype), op=hvd.Sum, postscale_factor=1 / 3, name="post3." + dtype)
    close(yi.asnumpy(), hv(n * iv, third).astype(dtype), dtype, "postscale 1/3 " + dtype)
    yi = hvd.allreduce(mx.nd.array(iv, dtype=dtype), op=hvd.Average, postscale_factor=0.3, name="avgp." + dtype)
    close(yi.asnumpy(), hv(n * iv, np.float64(0.3) / n).astype(dtype), dtype, "average postscale 0.3 " + dtype)
    yi = hvd.reducescatter(mx.nd.array(np.tile(iv[:2], n), dtype=dtype).reshape((2 * n, 1)), op=hvd.Sum,
                           prescale_factor=1 / 3, name="rspre3." + dtype)
    close(yi.asnumpy().ravel(), (n * hv(np.tile(iv[:2], n)[2 * r:2 * r + 2], third)).astype(dtype), dtype,
          "reducescatter prescale 1/3 " + dtype)
yi = hvd.allreduce(mx.nd.array([9, 12, 200], dtype="uint8"), op=hvd.Sum, prescale_factor=1 / 3, name="pre3.u8")
close(yi.asnumpy(), (n * hv([9, 12, 200], third) % 256).astype("uint8"), "uint8", "prescale 1/3 uint8")
# Out of the dtype's range: wrapped as integer arithmetic wraps (was a cast of an
# out-of-range float to an integer type: undefined behaviour).
yi = hvd.allreduce(mx.nd.array([3, 5, 0], dtype="uint8"), op=hvd.Sum, prescale_factor=-1, name="u8.neg")
close(yi.asnumpy(), (np.array([3, 5, 0]) * -n % 256).astype("uint8"), "uint8", "uint8 negative prescale")
yi = hvd.allreduce(mx.nd.array([20, -20], dtype="int8"), op=hvd.Sum, postscale_factor=5.0, name="i8.big")
close(yi.asnumpy(), ((np.array([20, -20]) * n * 5 + 128) % 256 - 128).astype("int8"), "int8",
      "int8 postscale past 127")

# Float Average and postscale: on 2 ranks the backend scales inside the reduction (a
# scaled-sum MPI op); the result must be bit for bit the sum scaled in the dtype, as a
# separate pass gives it. Alone (each waited for before the next; beyond the fusion
# threshold and sliced in the small-buffer configuration) and fused (all at once), with
# many distinct factors.
def scaled_expect(xs, dtype, op, post):
    t = np.dtype(dtype).type
    if n == 2:
        return (xs[0] + xs[1]) * t(post / (2 if op == hvd.Average else 1))
    return (np.sum(np.stack(xs).astype(np.float64), axis=0) * post /
            (n if op == hvd.Average else 1)).astype(dtype)


FACTORS = [1.0, 3.0, 0.1, 7.0, 0.3, 1.5, 2.5, 9.0, 0.7, 11.0, 13.0]
for fused in (False, True):
    pending = []
    for k, post in enumerate(FACTORS):
        for dtype in ("float32", "float64"):
            op = hvd.Average if k % 2 == 0 else hvd.Sum
            shape = (7,) if fused and k % 3 == 0 else (300000,)
            xs = [data(q, shape, dtype, 900 + k) for q in range(n)]
            y = hvd.allreduce_(mx.nd.array(xs[r], dtype=dtype), op=op, postscale_factor=post,
                               name="scaledsum.%d.%d.%s" % (fused, k, dtype))
            pending.append((y, scaled_expect(xs, dtype, op, post), dtype, op, post))
            if not fused:
                y.wait_to_read()
    for y, want, dtype, op, post in pending:
        what = "fused=%s %s %s postscale %s" % (fused, dtype, OPS[op], post)
        if n == 2:
            np.testing.assert_array_equal(y.asnumpy(), want, err_msg=what)
        else:
            close(y.asnumpy(), want, dtype, what)

# One-element tensors, and a non-string name (converted with str()).
one = hvd.allreduce(mx.nd.array([r + 1.0]), op=hvd.Sum, name=12345)
close(one.asnumpy(), np.array([n * (n + 1) / 2], dtype="float32"), "float32", "one element")

# Grouped allreduce, out of place and in place.
gx = [mx.nd.ones((i + 1, 2)) * (r + i) for i in range(5)]
gy = hvd.grouped_allreduce(gx, op=hvd.Sum, name="grp")
hvd.grouped_allreduce_(gx, op=hvd.Max, name="grp_")
for i in range(5):
    close(gy[i].asnumpy(), np.full((i + 1, 2), sum(k + i for k in range(n)), "float32"), "float32", "grouped")
    close(gx[i].asnumpy(), np.full((i + 1, 2), n - 1 + i, "float32"), "float32", "grouped_")

# Out-of-place grouped calls reading views of one buffer (rows of one array, one array
# twice, a large array's halves: beyond the zero-copy size), as Horovod reads them: they
# were refused ('views of one buffer'). Every buffer stays as it was; in place such a list
# is still refused (each is written: the engine would wait on itself).
parent_np = data(r, (6, 4), "float32", 77)
parents = [data(k, (6, 4), "float32", 77) for k in range(n)]
parent = mx.nd.array(parent_np)
big_parent = mx.nd.ones((2, 40000)) * (r + 1)
gv = hvd.grouped_allreduce([parent[0:2], parent[3], parent[4:6], parent, big_parent[0],
                            big_parent[1], parent], op=hvd.Sum, name="grp.views")
gav = hvd.grouped_allgather([parent[1:3], parent[1:3], parent[5]], name="grp.views.ag")
grs = hvd.grouped_reducescatter([parent, parent[0:n]], op=hvd.Sum, name="grp.views.rs")
psum = np.sum(parents, axis=0)
for got, want in zip(gv, [psum[0:2], psum[3], psum[4:6], psum, np.full((40000,), n * (n + 1) / 2),
                          np.full((40000,), n * (n + 1) / 2), psum]):
    close(got.asnumpy(), want.astype("float32"), "float32", "grouped views")
for got, want in zip(gav, [np.concatenate([p[1:3] for p in parents])] * 2 +
                     [np.concatenate([p[5] for p in parents])]):
    close(got.asnumpy(), want, "float32", "grouped allgather views")
rows = [6 // n + (1 if q < 6 % n else 0) for q in range(n)]
start = sum(rows[:r])
close(grs[0].asnumpy(), psum[start:start + rows[r]], "float32", "grouped reducescatter views")
close(grs[1].asnumpy(), psum[0:n][r:r + 1], "float32", "grouped reducescatter views")
np.testing.assert_array_equal(parent.asnumpy(), parent_np)
assert np.all(big_parent.asnumpy() == r + 1), "big parent written"
twice = mx.nd.ones((3,)) * (r + 1)
gt = hvd.grouped_allreduce([twice, twice], op=hvd.Sum, name="grp.twice")
for got in gt:
    close(got.asnumpy(), np.full((3,), n * (n + 1) / 2, "float32"), "float32", "grouped twice")
for k, bad in enumerate(([parent[0:2], parent[4:6]], [twice, twice])):
    try:
        hvd.grouped_allreduce_(bad, op=hvd.Sum, name="grp.views.inplace.%d" % k)
        raise AssertionError("in-place views of one buffer accepted")
    except ValueError as e:
        assert "views of one buffer" in str(e) or "twice" in str(e), str(e)
np.testing.assert_array_equal(parent.asnumpy(), parent_np)

# 500 small tensors in one step; one rank submits them in reverse order.
order = list(range(500))
if r == n - 1:
    order.reverse()
outs = {}
for i in order:
    outs[i] = hvd.allreduce(mx.nd.array([i, r], dtype="float64"), op=hvd.Sum, name="many.%d" % i)
for i in range(500):
    close(outs[i].asnumpy(), np.array([i * n, n * (n - 1) / 2]), "float64", "many %d" % i)

# Repeated names hit the response cache: same results on the second and third pass.
for rep in range(3):
    ys = [hvd.allreduce(mx.nd.ones((2,)) * (r + j + rep), op=hvd.Sum, name="rep.%d" % j) for j in range(20)]
    for j, y in enumerate(ys):
        close(y.asnumpy(), np.full((2,), sum(k + j + rep for k in range(n)), "float32"), "float32", "rep")
# A cached name whose shape changes is renegotiated, not mixed up.
y = hvd.allreduce(mx.nd.ones((3,)) * r, op=hvd.Sum, name="rep.0")
close(y.asnumpy(), np.full((3,), n * (n - 1) / 2, "float32"), "float32", "rep reshaped")

# A tensor larger than the fusion buffer and the per-call slice, beside small ones.
big = hvd.allreduce(mx.nd.ones((3 * 1024 * 1024,)) * (r + 1), op=hvd.Sum, name="big")
smalls = [hvd.allreduce(mx.nd.ones((10,)) * r, op=hvd.Sum, name="small.%d" % i) for i in range(4)]
b = big.asnumpy()
assert b.shape == (3 * 1024 * 1024,) and np.all(b == n * (n + 1) / 2), "big"
for s in smalls:
    close(s.asnumpy(), np.full((10,), n * (n - 1) / 2, "float32"), "float32", "small")

# Broadcast from every root, out of place and in place, all dtypes.
for root in range(n):
    for dtype in DTYPES:
        xs = [data(k, (2, 3), dtype, 500 + root) for k in range(n)]
        y = hvd.broadcast(mx.nd.array(xs[r], dtype=dtype), root, name="bc.%d.%s" % (root, dtype))
        t = mx.nd.array(xs[r], dtype=dtype)
        hvd.broadcast_(t, root_rank=root, name="bci.%d.%s" % (root, dtype))
        close(y.asnumpy(), xs[root], dtype, "broadcast")
        close(t.asnumpy(), xs[root], dtype, "broadcast_")

# Allgather: dim 0 differs per rank.
for dtype in DTYPES:
    xs = [data(k, (k + 1, 2, 2), dtype, 900) for k in range(n)]
    g = hvd.allgather(mx.nd.array(xs[r], dtype=dtype), name="ag.%s" % dtype)
    close(g.asnumpy(), np.concatenate(xs), dtype, "allgather")

# Alltoall with and without splits.
x = mx.nd.array(np.arange(2 * n * 3).reshape(2 * n, 3) + 100 * r)
y = hvd.alltoall(x, name="a2a")
want = np.concatenate([(np.arange(2 * n * 3).reshape(2 * n, 3) + 100 * k)[2 * r:2 * r + 2] for k in range(n)])
close(y.asnumpy(), want.astype("float32"), "float32", "alltoall")
splits_of = lambda k: np.array([(k + j) % 2 + 1 for j in range(n)], dtype=np.int32)
rows_of = lambda k: np.arange(int(splits_of(k).sum()) * 2).reshape(-1, 2) + 1000 * k
y, recv = hvd.alltoall(mx.nd.array(rows_of(r)), splits=splits_of(r), name="a2a.splits")
want, want_recv = [], []
for k in range(n):
    off = int(splits_of(k)[:r].sum())
    want.append(rows_of(k)[off:off + splits_of(k)[r]])
    want_recv.append(splits_of(k)[r])
close(y.asnumpy(), np.concatenate(want).astype("float32"), "float32", "alltoall splits")
close(recv.asnumpy(), np.array(want_recv, dtype="int32"), "int32", "received splits")

# An allgather under one name whose dim 0 changes on one rank only (cache invalidation).
for step, rows0 in enumerate([1, 3, 1]):
    rows = rows0 if r == 0 else 2
    g = hvd.allgather(mx.nd.ones((rows, 2)) * r, name="ag.changing")
    want = np.concatenate([np.full((rows0 if k == 0 else 2, 2), k, "float32") for k in range(n)])
    close(g.asnumpy(), want, "float32", "allgather changing rows %d" % step)

# One name used by allreduce, allgather and alltoall in turn, the same order on every rank
# (the allgather's and alltoall's size exchanges carry the name too: the response cache
# keeps a call's exchange and data apart and evicts both when the kind changes; with any
# cache capacity the calls meet their counterparts and the values are right).
for step in range(4):
    rows = 1 + (step + r) % 3
    y = hvd.allreduce(mx.nd.ones((3,)) * (r + 1), op=hvd.Sum, name="one.name")
    close(y.asnumpy(), np.full((3,), n * (n + 1) / 2, "float32"), "float32", "one.name allreduce")
    g = hvd.allgather(mx.nd.ones((rows, 2)) * r, name="one.name")
    want = np.concatenate([np.full((1 + (step + k) % 3, 2), k, "float32") for k in range(n)])
    close(g.asnumpy(), want, "float32", "one.name allgather %d" % step)
    t = hvd.alltoall(mx.nd.arange(n * 2).reshape((n, 2)) + 10 * r, name="one.name")
    want = np.stack([np.arange(2 * r, 2 * r + 2) + 10 * k for k in range(n)]).astype("float32")
    close(t.asnumpy(), want, "float32", "one.name alltoall %d" % step)

# int64 Average keeps all 64 bits.
big = 2 ** 60 + 1
yi = hvd.allreduce(mx.nd.array([big], dtype="int64"), op=hvd.Average, name="int64.avg")
assert yi.asnumpy().tolist() == [big], yi.asnumpy()

# 0-d arrays (mx.np under npx.set_np()) come back as mx.np arrays.
mx.npx.set_np()
s0 = hvd.allreduce(mx.np.array(float(r + 1)), op=hvd.Sum, name="zero-d")
assert isinstance(s0, mx.np.ndarray) and s0.shape == (), (type(s0), s0.shape)
assert float(s0) == n * (n + 1) / 2
b0 = mx.np.array(float(r))
hvd.broadcast_(b0, root_rank=n - 1, name="zero-d.bc")
assert float(b0) == n - 1
mx.npx.reset_np()

# A temporary input that Python drops right after the call stays alive.
tmp = hvd.allreduce(mx.nd.ones((1000,)) * 2 * (r + 1), op=hvd.Sum, name="temporary")
import gc; gc.collect()
close(tmp.asnumpy(), np.full((1000,), n * (n + 1), "float32"), "float32", "temporary")

# Topology from the host names (one host: local_size == size; namespace hosts: per host).
check_topology(hvd, hvd.allgather_object(socket.gethostname()))
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
