"""Grouped calls whose lists have different lengths on different ranks: every rank must get
an MXNetError naming the tensor and the ranks' counts at its read, none may hang (before,
the rank with fewer tensors went on with them reduced, the others waited forever for the
tensors it lacked), and the next calls of the same names must still work, through the
response cache too."""
import os

import mxnet as mx
import numpy as np

import mxhorovod as hvd
from expect import raises, works

hvd.init()
r, n = hvd.rank(), hvd.size()
NAIVE = os.environ.get("MXNET_ENGINE_TYPE") == "NaiveEngine"  # errors raise at the call


def group(count, rows=4):
    return [mx.nd.ones((rows, 2)) * (r + 1) for _ in range(count)]


def read_all(ys):
    for y in ys:
        y.asnumpy()


def mismatch(tag, call, counts):
    """``call(count)`` on every rank with this rank's count: every rank raises."""
    want = ("Mismatched numbers of tensors", "'%s.0'" % tag)
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

# A single call named like a group's tensor 0 against a group.
single_vs_group = (lambda c: [hvd.allreduce(mx.nd.ones((3,)), op=hvd.Sum, name="sg.0")]
                   if c == 1 else hvd.grouped_allreduce(group(c), op=hvd.Sum, name="sg"))
mismatch("sg", single_vs_group, [1] + [2] * (n - 1))
works("sg")

mx.nd.waitall()
print("RANK %d OK" % r, flush=True)
