"""Min and Max allreduce of float16/32/64 with a NaN or a signed zero on some ranks: every
rank must get the same result, the NaN (numpy's minimum / maximum), and -0 below +0.
Alone, fused with other tensors, small (MPI) and large (cross-memory attach), and the NaN
on each rank in turn. Against e.g. MPI_MIN, whose result depended on the operand order: on
2 ranks the rank holding the NaN kept it and the other lost it; on 3, the NaN of rank 1
was lost everywhere. Prints RANK <r> OK at the end."""
import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
DTYPES = ["float16", "float32", "float64"]
OPS = {hvd.Min: np.fmin, hvd.Max: np.fmax}  # the non-NaN values: fmin/fmax ignore NaN


def values(rank, size, dtype, nan_rank):
    x = np.linspace(-3, 3, size).astype(dtype) * (rank + 1)
    if rank == nan_rank:
        x[0] = np.nan
        x[size // 2] = np.nan
    return x


pending = []
for dtype in DTYPES:
    for size in (3, 100000):
        for nan_rank in range(n):
            for op in OPS:
                xs = [values(q, size, dtype, nan_rank) for q in range(n)]
                want = xs[0]
                for x in xs[1:]:
                    want = OPS[op](want, x)
                want = want.copy()
                want[0] = want[size // 2] = np.nan
                name = "mm.%s.%d.%d.%d" % (dtype, size, nan_rank, op)
                y = hvd.allreduce(mx.nd.array(xs[r], dtype=dtype), op=op, name=name)
                # The same, in a fused group beside a NaN-free tensor.
                g = hvd.grouped_allreduce([mx.nd.array(xs[r], dtype=dtype),
                                           mx.nd.ones((5,), dtype=dtype) * r], op=op,
                                          name="g" + name)
                pending.append((name, y, g, want, dtype, op))
for name, y, g, want, dtype, op in pending:
    for what, got in (("alone", y.asnumpy()), ("grouped", g[0].asnumpy())):
        np.testing.assert_array_equal(got, want, err_msg="%s %s on rank %d" % (name, what, r))
    other = np.full((5,), 0 if op == hvd.Min else n - 1, dtype=dtype)
    np.testing.assert_array_equal(g[1].asnumpy(), other, err_msg="%s other on rank %d" % (name, r))

# -0 and +0: Min gives -0, Max +0, on every rank, whichever rank holds which.
for dtype in DTYPES:
    for neg_rank in range(n):
        x = np.array([-0.0 if r == neg_rank else 0.0] * 4, dtype=dtype)
        lo = hvd.allreduce(mx.nd.array(x, dtype=dtype), op=hvd.Min, name="z.min.%s.%d" % (dtype, neg_rank))
        hi = hvd.allreduce(mx.nd.array(x, dtype=dtype), op=hvd.Max, name="z.max.%s.%d" % (dtype, neg_rank))
        assert np.all(np.signbit(lo.asnumpy())), (dtype, neg_rank, r, lo.asnumpy())
        assert not np.any(np.signbit(hi.asnumpy())), (dtype, neg_rank, r, hi.asnumpy())

# Every rank holds the same bits (the checks above would pass with two different NaNs).
mine = b"".join(y.asnumpy().tobytes() for _, y, _, _, _, _ in pending)
assert len(set(hvd.allgather_object(mine))) == 1, "ranks differ"
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
