"""Allgather and alltoall moving 2 GiB or more in one MPI call (byte counts or
displacements above 2**31 - 1): MPI-4's large-count calls. Before, refused with
'more than 2 GiB per call is not supported' where Horovod (element counts) works.
Memory: about 4.3 GiB per rank for each case.

Usage: core_big_counts.py allgather|alltoall     (allgather: 3 ranks; alltoall: 2 ranks)
Prints RANK <r> OK at the end."""
import sys

import mxnet as mx

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
W = 1024  # float32 per row
case = sys.argv[1]


def check_block(y, start, stop, value, what):
    block = y[start:stop]
    lo, hi = block.min().asscalar(), block.max().asscalar()
    assert lo == hi == value, "%s on rank %d: rows %d..%d hold %s..%s, want %s" % (
        what, r, start, stop, lo, hi, value)


if case == "allgather":
    # 1 GiB + 64 KiB per rank: rank 2's block starts past 2 GiB of the output.
    rows = 2**30 // (4 * W) + 16
    x = mx.nd.full((rows, W), r + 1.0)
    x[rows - 1] = 10.0 * (r + 1)  # the last row of each rank's block
    y = hvd.allgather(x, name="big.allgather")
    del x
    assert y.shape == (n * rows, W), y.shape
    for q in range(n):
        check_block(y, q * rows, (q + 1) * rows - 1, q + 1.0, "allgather block %d" % q)
        check_block(y, (q + 1) * rows - 1, (q + 1) * rows, 10.0 * (q + 1), "allgather last row %d" % q)
    del y
elif case == "alltoall":
    # Each rank sends 2 GiB + 64 KiB to itself and 2 rows to every other rank: a count
    # above 2**31 - 1 bytes.
    rows = 2**31 // (4 * W) + 16
    splits = [2] * n
    splits[r] = rows
    x = mx.nd.full((rows + 2 * (n - 1), W), r + 1.0)
    y, recv = hvd.alltoall(x, splits=splits, name="big.alltoall")
    del x
    want_rows = [rows if q == r else 2 for q in range(n)]
    assert recv.asnumpy().tolist() == want_rows, recv.asnumpy()
    assert y.shape == (sum(want_rows), W), y.shape
    start = 0
    for q in range(n):
        check_block(y, start, start + want_rows[q], q + 1.0, "alltoall from rank %d" % q)
        start += want_rows[q]
    del y
else:
    raise SystemExit("unknown case %r" % case)

ok = hvd.allreduce(mx.nd.ones((1,)), op=hvd.Sum, name="after").asnumpy()
assert ok.tolist() == [n], ok
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
