"""The scaled sum of 2-rank communicators (postscale / Average applied inside the
reduction) must be chosen alike by both ranks whatever else each rank reduced before:
rank 0 first reduces with 9 distinct factors in B = {0, 2}, rank 1 with none; then
A = {0, 1} reduces with a new factor, and with postscale 0.0 then -0.0 (distinct factors
for the sign of zero). Both A ranks must get exactly numpy's (x0 + x1) * dtype(post).
Run with MPICH's ring algorithms, where ranks that passed different ops to one allreduce
get half the buffer scaled twice or not at all. 3 ranks. Prints RANK <r> OK."""
import numpy as np
import mxnet as mx

import mxhorovod as hvd

A = hvd.ProcessSet([0, 1])
B = hvd.ProcessSet([0, 2])
hvd.init(process_sets=[A, B])
r = hvd.rank()
assert hvd.size() == 3, "run on 3 ranks"

if B.included():
    for k in range(9):
        y = hvd.allreduce(mx.nd.ones((4,)), op=hvd.Sum, postscale_factor=2.0 + k,
                          name="b.%d" % k, process_set=B)
        np.testing.assert_array_equal(y.asnumpy(), np.full((4,), 2 * (2.0 + k), "float32"))
if A.included():
    for dtype in ("float32", "float64"):
        for k, (post, n) in enumerate([(1.7, 1000), (1.7, 1048577), (0.0, 6), (-0.0, 6)]):
            xs = [np.random.RandomState(7 + q).uniform(-2, 2, n).astype(dtype) for q in (0, 1)]
            y = hvd.allreduce(mx.nd.array(xs[A.rank()], dtype=dtype), op=hvd.Sum,
                              postscale_factor=post, name="a.%s.%d" % (dtype, k),
                              process_set=A).asnumpy()
            want = (xs[0] + xs[1]) * np.dtype(dtype).type(post)
            what = "rank %d %s postscale %r, %d elements" % (r, dtype, post, n)
            np.testing.assert_array_equal(y, want, err_msg=what)
            assert (np.signbit(y) == np.signbit(want)).all(), what + ": sign of zero"
        x = mx.nd.array([1.0, -3.0], dtype=dtype)
        y = hvd.allreduce(x, op=hvd.Average, name="a.avg.%s" % dtype, process_set=A)
        np.testing.assert_array_equal(y.asnumpy(), np.array([1.0, -3.0], dtype))
hvd.allreduce(mx.nd.ones((1,)), name="end").wait_to_read()
print("RANK %d OK" % r, flush=True)
hvd.shutdown()
