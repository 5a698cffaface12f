"""Errors: mismatches between ranks raise on every rank at the next wait, naming the tensor
and both values, and the next correct collective works; bad input is refused at the call;
a late rank does not make the others' calls block; calls after shutdown raise; init()
after shutdown() works."""
import time

import mxnet as mx
import numpy as np
from mxnet.base import MXNetError

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()


def expect_error(arr, *needles):
    try:
        arr.asnumpy()
    except MXNetError as e:
        msg = str(e)
        for s in needles:
            assert s in msg, "expected %r in error: %s" % (s, msg)
        return
    raise AssertionError("no error raised; wanted %s" % (needles,))


def works(tag):
    y = hvd.allreduce(mx.nd.ones((2,)) * (r + 1), op=hvd.Sum, name="ok." + tag)
    np.testing.assert_array_equal(y.asnumpy(), np.full((2,), n * (n + 1) / 2, "float32"))


# Shape mismatch: rank 0 has (3,), the others (4,).
y = hvd.allreduce(mx.nd.ones((3,) if r == 0 else (4,)), name="mm.shape")
expect_error(y, "mm.shape", "shapes", "rank 0 has (3,)", "has (4,)")
assert np.isnan(y.asnumpy()).all(), y  # read again after the error: NaN, not garbage
works("shape")
# A failed in-place broadcast: the root keeps its array (it holds the result); the others'
# arrays are NaN. A failed in-place allreduce_: NaN everywhere.
x = mx.nd.ones((3,) if r == 0 else (4,)) * 7
hvd.broadcast_(x, root_rank=0, name="mm.bcast_")
expect_error(x, "mm.bcast_", "shapes")
if r == 0:
    np.testing.assert_array_equal(x.asnumpy(), np.full((3,), 7, "float32"))
else:
    assert np.isnan(x.asnumpy()).all(), x
x = mx.nd.ones((3,) if r == 0 else (4,))
hvd.allreduce_(x, name="mm.allreduce_")
expect_error(x, "mm.allreduce_", "shapes")
assert np.isnan(x.asnumpy()).all(), x
works("inplace")
# dtype mismatch.
y = hvd.allreduce(mx.nd.ones((3,), dtype="float32" if r == 0 else "float64"), name="mm.dtype")
expect_error(y, "mm.dtype", "data types", "float32", "float64")
works("dtype")
# Reduce-op mismatch.
y = hvd.allreduce(mx.nd.ones((3,)), op=hvd.Sum if r == 0 else hvd.Max, name="mm.op")
expect_error(y, "mm.op", "reduce ops", "Sum", "Max")
works("op")
# Scale-factor mismatch.
y = hvd.allreduce(mx.nd.ones((3,)), prescale_factor=1.0 if r == 0 else 2.0, name="mm.scale")
expect_error(y, "mm.scale", "prescale", "rank 0 has 1", "has 2")
works("scale")
# Broadcast root mismatch.
y = hvd.broadcast(mx.nd.ones((3,)), root_rank=0 if r == 0 else 1, name="mm.root")
expect_error(y, "mm.root", "root ranks", "rank 0 has 0", "has 1")
works("root")
# Different collectives under one name.
y = hvd.allreduce(mx.nd.ones((3,)), name="mm.kind") if r == 0 else hvd.broadcast(mx.nd.ones((3,)), 0, name="mm.kind")
expect_error(y, "mm.kind", "allreduce", "broadcast")
works("kind")


def fails_now(call, *needles):
    """call() raises, or returns arrays whose read raises, an error holding the needles."""
    try:
        out = call()
        for a in (out if isinstance(out, (list, tuple)) else [out]):
            a.asnumpy()
    except MXNetError as e:
        for s in needles:
            assert s in str(e), "expected %r in error: %s" % (s, e)
        return
    raise AssertionError("no error raised; wanted %s" % (needles,))


# Allgather and alltoall under a name another rank uses for another collective: their size
# exchange carries the call's name, so the coordinator fails both calls at once, as
# Horovod's does (they used to wait for each other under different names: a hang).
ones = mx.nd.ones
for name, first, others, kinds in [
        ("mk.ag", lambda: hvd.allreduce(ones((2,)), name="mk.ag"),
         lambda: hvd.allgather(ones((2,)), name="mk.ag"), ("allreduce", "allgather")),
        ("mk.ga", lambda: hvd.allgather(ones((2, 2)), name="mk.ga"),
         lambda: hvd.alltoall(ones((2 * n,)), name="mk.ga"), ("allgather", "alltoall")),
        ("mk.tb", lambda: hvd.alltoall(ones((n, 2)), splits=[1] * n, name="mk.tb"),
         lambda: hvd.broadcast(ones((2,)), root_rank=0, name="mk.tb"), ("alltoall", "broadcast")),
        ("mk.rs", lambda: hvd.reducescatter(ones((2 * n,)), name="mk.rs"),
         lambda: hvd.allgather(ones((2,)), name="mk.rs"), ("reducescatter", "allgather")),
        # A grouped reduction of 3 tensors against a grouped allgather's size exchange (its
        # tensor 0's name): the reduction's tensors 1 and 2 fail with it.
        ("mk.gg.0", lambda: hvd.grouped_allreduce([ones((2,))] * 3, name="mk.gg"),
         lambda: hvd.grouped_allgather([ones((2,)), ones((3,))], name="mk.gg"),
         ("allreduce", "allgather"))]:
    fails_now(first if r == 0 else others, "Mismatched operations", "'%s'" % name, *kinds)
    works(name)
# The same after every rank made both calls under the name twice (each kind cached in
# turn; a hit of one kind must not wait for the peers' hit of the other).
for name, kinds in [("mk.c1", ("allreduce", "allgather")), ("mk.c2", ("allgather", "allreduce"))]:
    calls = {"allreduce": lambda: hvd.allreduce(ones((2, 2)), name=name),
             "allgather": lambda: hvd.allgather(ones((2, 2)), name=name)}
    for _ in range(2):
        for kind in kinds:
            calls[kind]().asnumpy()
    fails_now(calls[kinds[0]] if r == 0 else calls[kinds[1]], "Mismatched operations", "'%s'" % name)
    works(name)
# Allgather with different trailing dimensions or dtypes: refused at the call on every
# rank (as Horovod's allgather, which waits), as an MXNetError that is also a ValueError.
for call, needles in [
        (lambda: hvd.allgather(mx.nd.ones((2, 3) if r == 0 else (2, 4)), name="mm.gather"),
         ["allgather 'mm.gather'", "rank 0 has float32 (N, 3)", "has float32 (N, 4)"]),
        (lambda: hvd.allgather(mx.nd.ones((17, 10 * (r + 1), 17)), name="mm.gather3"),
         ["'mm.gather3'", "rank 0 has float32 (N, 10, 17)", "has float32 (N, 20, 17)"]),
        (lambda: hvd.allgather(mx.nd.ones((r + 1, 2), dtype="float32" if r == 0 else "int32"),
                               name="mm.gtype"),
         ["'mm.gtype'", "rank 0 has float32 (N, 2)", "has int32 (N, 2)"]),
        (lambda: hvd.grouped_allgather([mx.nd.ones((2, 2)), mx.nd.ones((2,) * (2 + (r > 0)))],
                                       name="mm.ggrp"),
         ["grouped_allgather 'mm.ggrp.1'", "rank 0 has float32 (N, 2)", "has float32 (N, 2, 2)"]),
        # A 0-d array on the last rank only: every rank raises (the others hung).
        (lambda: hvd.allgather(mx.nd.array(1.0) if r == n - 1 else mx.nd.ones((1,)), name="mm.g0d"),
         ["allgather 'mm.g0d'", "0-d array", "ranks [%d]" % (n - 1)]),
        # A different number of tensors in a group.
        (lambda: hvd.grouped_allgather([mx.nd.ones((1, 2)) for _ in range(1 + (r > 0))],
                                       name="mm.gcount"),
         ["grouped_allgather 'mm.gcount'", "different numbers of tensors"]),
        # More than 9 dimensions, differing in the last: the message still tells them apart.
        (lambda: hvd.allgather(mx.nd.ones((1,) * 9 + ((1,) if r == 0 else (2,))), name="mm.g10"),
         ["'mm.g10'", "10 dimensions"])]:
    try:
        call()
        raise AssertionError("not refused: %s" % needles)
    except MXNetError as e:
        assert isinstance(e, ValueError), type(e)
        for needle in needles:
            assert needle in str(e), (needle, str(e))
works("gather")

# Refused at the call, identically on every rank (nothing reaches the peers).
for bad, needle in [(mx.nd.ones((2,), dtype="bool"), "dtype bool"),
                    (mx.nd.ones((2, 2)).tostype("row_sparse"), "row_sparse")]:
    try:
        hvd.allreduce(bad, name="bad")
        raise AssertionError("not refused: " + needle)
    except ValueError as e:
        assert needle in str(e) and "'bad'" in str(e), str(e)
views = mx.nd.ones((4, 2))
for call, needle in [(lambda: hvd.allreduce(mx.nd.ones(2), name="a\0b"), "NUL"),
                     (lambda: hvd.allreduce(mx.nd.ones(2), name="\udc80"), "Unicode"),
                     (lambda: hvd.allreduce(mx.nd.ones(2), name="p", priority=2**40), "32-bit"),
                     (lambda: hvd.allreduce(mx.nd.ones(2), name="nan", prescale_factor=float("nan")), "finite"),
                     (lambda: hvd.allreduce(mx.nd.ones(2), name="fa", prescale_factor=np.ones(2)), "'fa': prescale_factor must be a real number"),
                     (lambda: hvd.grouped_allreduce([mx.nd.ones(2)], name="fg", postscale_factor=1 + 0j), "'fg': postscale_factor must be a real number"),
                     (lambda: hvd.grouped_allreduce_([views, views[0:2]], name="v1"), "views"),
                     (lambda: hvd.grouped_allreduce_([views[0:2], views[2:4]], name="v2"), "views"),
                     (lambda: hvd.allreduce([1, 2]), "NDArray"),
                     (lambda: hvd.allreduce(mx.nd.ones(2, dtype="int32"), op=hvd.Adasum), "Adasum takes float16"),
                     (lambda: hvd.allreduce(mx.nd.ones(2), op=hvd.Sum, average=True), "supersedes"),
                     (lambda: hvd.broadcast(mx.nd.ones(2), root_rank=n), "root"),
                     (lambda: hvd.grouped_allreduce_([mx.nd.ones(2)] * 2), "twice"),
                     (lambda: hvd.alltoall(mx.nd.ones((2 * n + 1, 2))), "divisible"),
                     (lambda: hvd.alltoall(mx.nd.ones((4, 2)), splits=np.ones(n, dtype=np.float32)), "integers"),
                     (lambda: hvd.alltoall(mx.nd.ones((4, 2)), splits=np.ones(n + 1, dtype=np.int32)), "entries"),
                     (lambda: hvd.alltoall(mx.nd.ones((1, 2)), splits=np.full(n, 5, dtype=np.int32)), "more than")]:
    try:
        call()
        raise AssertionError("not refused: " + needle)
    except (ValueError, TypeError) as e:
        assert needle in str(e), (needle, str(e))
        # What Horovod's tests catch (its core reports these through check_call).
        assert isinstance(e, (MXNetError, TypeError)), (needle, type(e))
works("refused")

# The same checks in the core, below the Python layer: a handle given twice (also as one
# tensor's output and another's input, in a large group: the check is sorted, not
# pairwise), and one name twice in a group (refused at the call, nothing submitted: none
# of its names is left in line).
from mxhorovod import _core  # noqa: E402
big = [mx.nd.ones(3) for _ in range(300)]
hs = [x.handle.value for x in big]
for ins, outs, needle in [(hs[:2] + [hs[0]], hs[:2] + [hs[0]], "'g.2' and 'g.0'"),
                          (hs[:299], hs[1:300], "views of one buffer")]:
    try:
        _core.grouped_allreduce(ins, outs, ["g.%d" % i for i in range(len(ins))], hvd.Sum, 1.0,
                                1.0, 0, 0, False)
        raise AssertionError("not refused: " + needle)
    except ValueError as e:
        assert needle in str(e), (needle, str(e))
try:
    _core.grouped_allreduce(hs[:300], hs[:300], ["dupname.%d" % (i % 299) for i in range(300)],
                            hvd.Sum, 1.0, 1.0, 0, 0, False)
    raise AssertionError("not refused: one name twice")
except ValueError as e:
    assert "grouped allreduce: the name 'dupname.0' appears twice" in str(e), str(e)
np.testing.assert_array_equal(big[0].asnumpy(), np.ones(3, "float32"))  # untouched
# None of the refused group's names is in line: they work now.
grp = hvd.grouped_allreduce([mx.nd.ones(2) * r for _ in range(2)], op=hvd.Sum, name="dupname")
for x in grp:
    np.testing.assert_array_equal(x.asnumpy(), np.full((2,), n * (n - 1) / 2, "float32"))
works("core_refused")
# A size exchange on some ranks meeting a plain allgather of the same name and shape on
# others (only through the core's API): refused as a mismatch, not run (the ranks' response
# caches would place the entry differently).
src, dst = mx.nd.ones((1, 3), dtype="int64"), mx.nd.empty((n, 3), dtype="int64")
try:
    _core.grouped_allgather([src.handle.value], [dst.handle.value], ["phase"], 0, 0,
                            size_exchange=(r == 0))
    dst.asnumpy()
    raise AssertionError("an exchange met a plain allgather")
except MXNetError as e:
    assert "Mismatched operations for allgather 'phase'" in str(e), str(e)
    assert "allgather (its size exchange)" in str(e) and "allgather (its data)" in str(e), str(e)
works("phase")

# Two collectives reading one float32 2-D array (a weight's shape, whose MKLDNN layout is
# settled first), issued in different orders on different ranks: settling must not wait for
# this rank's own first collective, which needs the peers' second call (it used to hang).
w = mx.nd.ones((4, 4)) * (r + 1)
order = ["a", "b"] if r % 2 == 0 else ["b", "a"]
ys = {k: hvd.allreduce(w, op=hvd.Sum, name="ord." + k) for k in order}
bs = {k: hvd.broadcast(w, root_rank=0, name="ordb." + k) for k in order}
for k in order:
    np.testing.assert_array_equal(ys[k].asnumpy(), np.full((4, 4), n * (n + 1) / 2, "float32"))
    np.testing.assert_array_equal(bs[k].asnumpy(), np.ones((4, 4), "float32"))
# The same for a collective of another's output (chains x -> allreduce -> allreduce), the
# chains issued in different orders: settling the middle array must not wait for the
# collective that writes it (found by the breaker helper; it hung).
src = {k: mx.nd.ones((4, 4)) for k in "ac"}
chains = {}
for k in (["a", "c"] if r % 2 == 0 else ["c", "a"]):
    mid = hvd.allreduce(src[k], op=hvd.Sum, name="chain1." + k)
    chains[k] = hvd.allreduce(mid, op=hvd.Sum, name="chain2." + k)
for k in "ac":
    np.testing.assert_array_equal(chains[k].asnumpy(), np.full((4, 4), n * n, "float32"))

# A late rank: the others' calls return at once. A second call of a name still in flight
# (the late rank's first one is not made yet) waits for the first and meets the peers'
# second call of that name: calls of one name are matched in call order on every rank,
# whatever order their inputs become ready in (against 61fda93 the second was refused on
# some ranks, and the first of one rank could meet the second of another: wrong sums).
# The late rank is LATE s late; the others' calls must take well under that (half of it:
# 4 ranks on 2 cores may wait a second or so for the CPU, never for the late rank).
LATE = 4.0
t0 = time.time()
if r == n - 1:
    time.sleep(LATE)
a = hvd.allreduce(mx.nd.ones((4,)) * r, op=hvd.Sum, name="late.ar")
b = hvd.broadcast(mx.nd.ones((4,)) * r, root_rank=0, name="late.bc")
c = hvd.allreduce_(mx.nd.ones((4,)) * r, op=hvd.Sum, name="late.ar_")
d = hvd.allreduce(mx.nd.ones((4,)) * r, op=hvd.Sum, name="late.gr.1")
dup = hvd.allreduce(mx.nd.ones((4,)) * 10 * (r + 1), op=hvd.Sum, name="late.ar")
call_time = time.time() - t0
if r != n - 1:
    assert call_time < LATE / 2, "calls blocked for %.2fs waiting for the late rank" % call_time
# A group fails as a whole when one member fails (here a shape mismatch). MXNet raises
# the error once, at the first read of any output; every output (new or in place, read
# before or after) is NaN, never stale or uninitialised numbers that pass for results.
inplace = [mx.nd.ones((3,)), mx.nd.ones((2, 2), dtype="float64"),
           mx.nd.ones((5,) if r == 0 else (6,), dtype="float16")]
grp = hvd.grouped_allreduce([mx.nd.ones((4,)), mx.nd.ones((3,) if r == 0 else (2,))],
                            name="late.gr")
hvd.grouped_allreduce_(inplace, name="late.gr")  # the second call of these names
expect_error(grp[1], "late.gr.1", "shapes")
assert np.isnan(grp[1].asnumpy()).all() and np.isnan(grp[0].asnumpy()).all(), grp
expect_error(inplace[2], "late.gr.2", "shapes")
for x in inplace:
    assert np.isnan(x.asnumpy()).all(), x
np.testing.assert_array_equal(dup.asnumpy(), np.full((4,), 10 * n * (n + 1) / 2, "float32"))
np.testing.assert_array_equal(a.asnumpy(), np.full((4,), n * (n - 1) / 2, "float32"))
np.testing.assert_array_equal(b.asnumpy(), np.zeros((4,), "float32"))
np.testing.assert_array_equal(c.asnumpy(), np.full((4,), n * (n - 1) / 2, "float32"))
np.testing.assert_array_equal(d.asnumpy(), np.full((4,), n * (n - 1) / 2, "float32"))
mx.nd.waitall()  # earlier, handled errors are not raised again

# One name reused every step on the same array (a training loop): legal, the engine
# orders the operations.
g = mx.nd.ones((10,)) * (r + 1)
for step in range(3):
    hvd.allreduce_(g, name="grad.0", op=hvd.Sum)
np.testing.assert_array_equal(g.asnumpy(), np.full((10,), (n * (n + 1) / 2) * n ** 2, "float32"))

# After shutdown, calls raise at once; init() again works.
hvd.allreduce(mx.nd.ones(1), name="barrier").asnumpy()
hvd.shutdown()
assert not hvd.is_initialized()
for call in (lambda: hvd.allreduce(mx.nd.ones(2), name="after"), lambda: hvd.rank(),
             lambda: hvd.broadcast_(mx.nd.ones(2), 0, name="after.bc")):
    try:
        call()
        raise AssertionError("call after shutdown accepted")
    except ValueError as e:
        assert "not initialized" in str(e) or "has not been initialized" in str(e), str(e)
hvd.init()
works("reinit")
# A peer's shutdown stops this rank too; init() alone would wait for gone peers forever,
# so it is refused until this rank has shut down as well; then all start together.
if r == 0:
    hvd.shutdown()
else:
    deadline = time.time() + 30
    while hvd.is_initialized() and time.time() < deadline:
        time.sleep(0.01)
    assert not hvd.is_initialized()
    try:
        hvd.init()
        raise AssertionError("init() after a peer's shutdown accepted")
    except ValueError as e:
        assert "call hvd.shutdown() on this rank first" in str(e), str(e)
    hvd.shutdown()
hvd.init()
works("after.peer.shutdown")
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
