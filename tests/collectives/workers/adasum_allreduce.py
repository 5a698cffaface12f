"""op=hvd.Adasum on every rank against a numpy reference of the same tree (pairs (0,1),
(2,3), ..., a rank without a partner carried up; float64 sums, the vector rounded to its
dtype after each pair): identical tensors (the tensor itself), orthogonal ones (their sum),
random float16/32/64 ones; single calls fused together, grouped and in-place calls (each
tensor its own dot products), zero vectors, a process set, a joined rank (it adds zeros),
and the refusals. Every rank's result has the same bits. Run on 2, 3 or 4 ranks. Prints
RANK <r> OK."""
import sys

import mxnet as mx
import numpy as np

import mxhorovod as hvd

n_world = int(sys.argv[1]) if len(sys.argv) > 1 else None
sub = hvd.ProcessSet(range(1, n_world)) if n_world and n_world > 1 else None
hvd.init(process_sets=[sub] if sub else None)
r, n = hvd.rank(), hvd.size()
TINY = np.sqrt(np.finfo(np.float64).tiny)  # sqrt(DBL_MIN): Horovod's threshold


def pair(a, b, dtype):
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    dot, na, nb = np.dot(a64, b64), np.dot(a64, a64), np.dot(b64, b64)
    ca = 1.0 - dot / na * 0.5 if na >= TINY else 1.0
    cb = 1.0 - dot / nb * 0.5 if nb >= TINY else 1.0
    out = ca * a64 + cb * b64
    if dtype == np.float16:  # the core rounds float16 through float32
        out = out.astype(np.float32)
    return out.astype(dtype).reshape(a.shape)


def tree(vs, dtype):
    vs = [np.asarray(v, dtype=dtype) for v in vs]
    s = 1
    while s < len(vs):
        for g in range(0, len(vs), 2 * s):
            if g + s < len(vs):
                vs[g] = pair(vs[g], vs[g + s], dtype)
        s *= 2
    return vs[0]


def data(rank, shape, dtype, seed):
    return np.random.RandomState(seed * 100 + rank).uniform(-2, 2, size=shape).astype(dtype)


TOL = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-13}


def check(got, want, what, exact=False, ps=None):
    got = got.asnumpy() if isinstance(got, mx.nd.NDArray) else got
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    if exact:
        assert np.array_equal(got, want), (r, what, got, want)
    else:
        tol = TOL[want.dtype.type]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                   atol=tol * float(np.abs(want).max() + 1), err_msg=what)
    # The same bits on every rank of the set.
    rows = hvd.allgather(mx.nd.array(got.reshape(1, -1).view(np.uint8), dtype="uint8"),
                         name="bits." + what, process_set=ps or hvd.global_process_set).asnumpy()
    assert all(np.array_equal(rows[0], row) for row in rows), (r, what, "ranks differ")


def expect_raise(needles, fn):
    try:
        out = fn()
        for o in out if isinstance(out, list) else [out]:
            o.asnumpy()
    except Exception as e:
        for s in needles:
            assert s in str(e), "expected %r in: %s" % (s, e)
        return
    raise AssertionError("rank %d: no error; wanted %s" % (r, needles))


dtypes = [np.float16, np.float32, np.float64]
for dt in dtypes:
    name = np.dtype(dt).name
    # Identical on every rank: Adasum(a, a) = a, exactly.
    a = data(0, (3, 5), dt, 1)
    check(hvd.allreduce(mx.nd.array(a, dtype=dt), op=hvd.Adasum, name="same." + name), a,
          "same." + name, exact=True)
    # Orthogonal (disjoint supports): a.b = 0, so the sum, exactly.
    o = np.zeros((n, 4), dtype=dt)
    o[r] = data(r, (4,), dt, 2)
    want = sum(np.eye(n, dtype=dt)[q][:, None] * data(q, (4,), dt, 2) for q in range(n))
    check(hvd.allreduce(mx.nd.array(o, dtype=dt), op=hvd.Adasum, name="orth." + name),
          want.astype(dt), "orth." + name, exact=True)
    # Random, out of place and in place.
    x = data(r, (7, 9), dt, 3)
    want = tree([data(q, (7, 9), dt, 3) for q in range(n)], dt)
    check(hvd.allreduce(mx.nd.array(x, dtype=dt), op=hvd.Adasum, name="rand." + name), want,
          "rand." + name)
    y = mx.nd.array(x, dtype=dt)
    hvd.allreduce_(y, op=hvd.Adasum, name="inplace." + name)
    check(y, want, "inplace." + name)

# Several single calls in one cycle are fused into one buffer: each keeps its own dot
# products (an identical tensor among random ones still comes back as itself). Twice: the
# second time from the response cache.
for rep in range(2):
    outs, wants = [], []
    for i in range(6):
        shape = (11 + i,)
        x = data(0, shape, np.float32, 10 + i) if i % 2 else data(r, shape, np.float32, 10 + i)
        wants.append(x if i % 2 else tree([data(q, shape, np.float32, 10 + i) for q in range(n)],
                                          np.float32))
        outs.append(hvd.allreduce(mx.nd.array(x), op=hvd.Adasum, name="fused.%d" % i))
    for i, (o, w) in enumerate(zip(outs, wants)):
        check(o, w, "fused.%d.%d" % (rep, i), exact=bool(i % 2))

# Grouped, out of place and in place: random, identical and orthogonal tensors of one dtype.
for dt in (np.float32, np.float64):
    rand = data(r, (5, 3), dt, 20)
    same = data(0, (8,), dt, 21)
    orth = np.zeros((n,), dtype=dt)
    orth[r] = r + 1
    wants = [tree([data(q, (5, 3), dt, 20) for q in range(n)], dt), same,
             np.arange(1, n + 1).astype(dt)]
    name = "grp." + np.dtype(dt).name
    got = hvd.grouped_allreduce([mx.nd.array(v, dtype=dt) for v in (rand, same, orth)],
                                op=hvd.Adasum, name=name)
    for i, (g, w) in enumerate(zip(got, wants)):
        check(g, w, "%s.%d" % (name, i), exact=i > 0)
    arrs = [mx.nd.array(v, dtype=dt) for v in (rand, same, orth)]
    hvd.grouped_allreduce_(arrs, op=hvd.Adasum, name=name + "_")
    for i, (g, w) in enumerate(zip(arrs, wants)):
        check(g, w, "%s_.%d" % (name, i), exact=i > 0)

# Zero vectors: a zero side drops out (Adasum(a, 0) = a); all zeros give zeros (no 0/0).
z = np.zeros(6, np.float32) if r == 0 else data(r, (6,), np.float32, 30)
want = tree([np.zeros(6, np.float32)] + [data(q, (6,), np.float32, 30) for q in range(1, n)],
            np.float32)
check(hvd.allreduce(mx.nd.array(z), op=hvd.Adasum, name="zero.one"), want, "zero.one")
check(hvd.allreduce(mx.nd.zeros(6), op=hvd.Adasum, name="zero.all"), np.zeros(6, np.float32),
      "zero.all", exact=True)
# A NaN against zero vectors: the whole tensor is NaN (the zero side must not pass it on).
v = np.array([np.nan, 1, 2], np.float32) if r == n - 1 else np.zeros(3, np.float32)
got = hvd.allreduce(mx.nd.array(v), op=hvd.Adasum, name="nan.zero").asnumpy()
assert np.isnan(got).all(), (r, got)

# A process set: ranks 1 .. n-1, the tree over the set's ranks in set order.
if sub is not None and sub.included():
    x = data(r, (10,), np.float32, 40)
    want = tree([data(q, (10,), np.float32, 40) for q in sub.ranks], np.float32)
    check(hvd.allreduce(mx.nd.array(x), op=hvd.Adasum, name="set", process_set=sub), want,
          "set", ps=sub)

# Refusals at the call, on every rank, naming the tensor.
expect_raise(["allreduce 'int'", "Adasum", "int32"],
             lambda: hvd.allreduce(mx.nd.ones(3, dtype="int32"), op=hvd.Adasum, name="int"))
expect_raise(["grouped.int.1", "Adasum", "int64"],
             lambda: hvd.grouped_allreduce([mx.nd.ones(3), mx.nd.ones(3, dtype="int64")], op=hvd.Adasum,
                                           name="grouped.int"))
expect_raise(["allreduce 'pre'", "Adasum", "prescale_factor"],
             lambda: hvd.allreduce(mx.nd.ones(3), op=hvd.Adasum, name="pre", prescale_factor=2.0))
expect_raise(["allreduce 'post'", "Adasum", "postscale_factor"],
             lambda: hvd.allreduce_(mx.nd.ones(3), op=hvd.Adasum, name="post",
                                    postscale_factor=0.5))
expect_raise(["reducescatter", "Adasum"],
             lambda: hvd.reducescatter(mx.nd.ones((n, 2)), op=hvd.Adasum, name="rs"))

# A joined rank adds zeros: the others get the tree without it.
if r == n - 1:
    hvd.join()
else:
    x = data(r, (9,), np.float64, 50)
    vs = [data(q, (9,), np.float64, 50) for q in range(n - 1)] + [np.zeros(9)]
    got = hvd.allreduce(mx.nd.array(x, dtype="float64"), op=hvd.Adasum, name="joined")
    np.testing.assert_allclose(got.asnumpy(), tree(vs, np.float64), rtol=1e-13, atol=1e-13)
    if n > 2:  # the zero drops out: the tree of the other ranks
        np.testing.assert_allclose(got.asnumpy(), tree(vs[:-1], np.float64), rtol=1e-13, atol=1e-13)
    hvd.join()

print("RANK %d OK" % r, flush=True)
