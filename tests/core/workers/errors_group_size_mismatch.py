"""Grouped calls whose lists have different lengths on different ranks: every rank must get
an MXNetError naming the tensor and the ranks' counts at its read, none may hang (before,
the rank with fewer tensors went on with them reduced, the others waited forever for the
tensors it lacked), and the next calls of the same names must still work, through the
response cache too. An empty list on one rank is such a call: that rank gets [] at once
(as in Horovod), the peers the error (before, they waited forever); an empty list on every
rank gives [] everywhere, and unnamed calls stay numbered alike on every rank. A grouped
call of one tensor and a single call under the same name fail alike."""
import os

import mxnet as mx
import numpy as np

import mxhorovod as hvd
from support.expect import raises, works

hvd.init()
r, n = hvd.rank(), hvd.size()
NAIVE = os.environ.get("MXNET_ENGINE_TYPE") == "NaiveEngine"  # errors raise at the call


def group(count, rows=4):
    return [mx.nd.ones((rows, 2)) * (r + 1) for _ in range(count)]


def read_all(ys):
    for y in ys:
        y.asnumpy()


def mismatch(tag, call, counts, want=("Mismatched numbers of tensors",)):
    """``call(count)`` on every rank with this rank's count: every rank raises."""
    want = tuple(want) + ("'%s.0'" % tag,)
    if NAIVE:
        raises(lambda: call(counts[r]), *want)
    else:
        ys = call(counts[r])
        raises(lambda: read_all(ys), *want)
    mx.nd.waitall()


def agree(tag, call, count):
    ys = call(count)
    total = n * (n + 1) / 2
    for y in ys:
        np.testing.assert_allclose(y.asnumpy(), np.full(y.shape, total), err_msg=tag)


def allreduce(tag):
    return lambda c: hvd.grouped_allreduce(group(c), op=hvd.Sum, name=tag)


def reducescatter(tag):
    return lambda c: hvd.grouped_reducescatter(group(c, rows=n), op=hvd.Sum, name=tag)


# Rank 0 has one tensor fewer than the others; on 3 ranks every rank a different count.
counts = [2 + k for k in range(n)] if n > 2 else [1, 2]
for tag, make in [("ga", allreduce), ("grs", reducescatter)]:
    agree(tag, make(tag), 3)  # cached with 3 tensors on every rank
    mismatch(tag, make(tag), counts)
    works(tag + ".1")
    agree(tag, make(tag), 3)  # the same names, agreeing again
    mismatch(tag, make(tag), list(reversed(counts)))
    agree(tag, make(tag), 2)
    works(tag + ".2")

# A single call named like a group's tensor 0 against a group: the error says which is which.
single_vs_group = (lambda c: [hvd.allreduce(mx.nd.ones((3,)), op=hvd.Sum, name="sg.0")]
                   if c == 1 else hvd.grouped_allreduce(group(c), op=hvd.Sum, name="sg"))
mismatch("sg", single_vs_group, [1] + [2] * (n - 1),
         ("Mismatched calls", "a single call", "a grouped call of 2 tensors", "distinct names"))
works("sg")


# A grouped call of one tensor 'sc' and a single call 'sc.0' share a name and a length.
# Made in opposite orders on alternate ranks, they were paired with each other: each rank
# silently got the other call's sum. Now both calls fail on every rank; made in the same
# order, each meets its own kind.
def grouped_one():
    return hvd.grouped_allreduce(group(1), op=hvd.Sum, name="sc")


def single_one():
    return [hvd.allreduce(mx.nd.ones((4, 2)) * 100 * (r + 1), op=hvd.Sum, name="sc.0")]


for call in ([grouped_one, single_one] if r % 2 == 0 else [single_one, grouped_one]):
    want = ("Mismatched calls", "'sc.0'", "a grouped call of 1 tensor", "a single call")
    if NAIVE:
        raises(call, *want)
    else:
        ys = call()
        raises(lambda: read_all(ys), *want)
    mx.nd.waitall()
for _ in range(2):  # the second time through the response cache
    ys, zs = grouped_one(), single_one()
    np.testing.assert_array_equal(ys[0].asnumpy(), np.full((4, 2), n * (n + 1) / 2))
    np.testing.assert_array_equal(zs[0].asnumpy(), np.full((4, 2), 100 * n * (n + 1) / 2))


def empty_on(tag, call, empty_rank, count=2, error_at_call=False):
    """``call(0)`` on ``empty_rank`` returns [] at once; ``call(count)`` on the others
    raises naming '<tag>.0' and both lengths (at the call for allgather, which waits for
    the peers' layouts, and under NaiveEngine; else at the read)."""
    if r == empty_rank:
        assert call(0) == [], tag
        return
    want = ("Mismatched numbers of tensors", "'" + tag, "rank %d passed 0" % empty_rank,
            "passed %d" % count)
    if NAIVE or error_at_call:
        raises(lambda: call(count), *want)
    else:
        ys = call(count)
        raises(lambda: read_all(ys), *want)
    mx.nd.waitall()


def allreduce_(tag):
    return lambda c: hvd.grouped_allreduce_(group(c), op=hvd.Sum, name=tag)


def allgather(tag):
    return lambda c: hvd.grouped_allgather(group(c), name=tag)


def agree_gather(tag, count):
    ys = hvd.grouped_allgather(group(count), name=tag)
    want = np.concatenate([np.full((4, 2), k + 1) for k in range(n)])
    for y in ys:
        np.testing.assert_array_equal(y.asnumpy(), want, err_msg=tag)


# An empty list on one rank (0, then the last), the peers passing tensors; then on every rank.
for tag, make in [("ea", allreduce), ("ea_", allreduce_), ("ers", reducescatter)]:
    agree(tag, make(tag), 2)  # cached with 2 tensors on every rank
    empty_on(tag, make(tag), 0)
    works(tag + ".e1")
    agree(tag, make(tag), 2)
    empty_on(tag, make(tag), n - 1, count=3)
    assert make(tag)(0) == [], tag  # empty everywhere: [] at once on every rank, no error
    agree(tag, make(tag), 2)
    works(tag + ".e2")
agree_gather("eg", 2)
agree_gather("eg", 2)  # its layout exchange ('eg.0', a size exchange) cached
empty_on("eg", allgather("eg"), n - 1, error_at_call=True)
works("eg.e1")
assert hvd.grouped_allgather([], name="eg") == []
agree_gather("eg", 2)

# Unnamed: an empty call takes its number like the peers' call (one rank empty, then every
# rank), so the unnamed calls after it still meet their counterparts.
unnamed = lambda c: hvd.grouped_allreduce(group(c), op=hvd.Sum)  # noqa: E731
agree("unnamed", unnamed, 2)
empty_on("grouped_allreduce.noname.", unnamed, 0)
agree("unnamed after one empty", unnamed, 2)
assert unnamed(0) == []
agree("unnamed after all empty", unnamed, 3)
unnamed_rs = lambda c: hvd.grouped_reducescatter(group(c, rows=n), op=hvd.Sum)  # noqa: E731
empty_on("reducescatter.noname.", unnamed_rs, n - 1)
agree("unnamed reducescatter after one empty", unnamed_rs, 2)
empty_on("grouped_allgather.noname.", lambda c: hvd.grouped_allgather(group(c)), 0,
         error_at_call=True)
ys = hvd.grouped_allgather(group(1))
np.testing.assert_array_equal(ys[0].asnumpy(), np.concatenate([np.full((4, 2), k + 1) for k in range(n)]))

mx.nd.waitall()
print("RANK %d OK" % r, flush=True)
