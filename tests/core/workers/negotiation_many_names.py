"""A new name per call (a step number in the name, or no name: numbered per call) for many
calls: the core's per-name call-order lines are swept, so what it keeps stays bounded
(before, the sweep after the first never came once the names outnumbered 4,096: about 200
bytes kept per name, without bound), also when a grouped call takes several new names at
once. Every result checked. Prints RANK <r> OK."""
import mxnet as mx
import numpy as np

import mxhorovod as hvd
from mxhorovod import _core

hvd.init()
r, n = hvd.rank(), hvd.size()
total = n * (n + 1) / 2
x = mx.nd.ones((2,)) * (r + 1)

calls = 30000
peak = 0
for k in range(calls):
    # Half named by step (Horovod scripts: name='loss_%d' % step), half unnamed.
    y = hvd.allreduce(x, op=hvd.Sum, name=("loss_%d" % k) if k % 2 else None)
    if k % 500 == 0:
        np.testing.assert_array_equal(y.asnumpy(), np.full((2,), total, "float32"))
        peak = max(peak, _core.queue_lines(0))
mx.nd.waitall()
peak = max(peak, _core.queue_lines(0))
print("rank %d: %d calls of distinct names, at most %d lines kept" % (r, calls, peak), flush=True)
# The sweep keeps the names of the last two periods of at least 4,096 calls (and those in
# flight, here at most 500): far below the number of names.
assert peak <= 3 * 4096, "the core kept %d names' lines after %d calls" % (peak, calls)

# Grouped calls: several new names per call (k names a call once made each sweep period k
# times longer than the last: kept without bound too).
xs = [x, x * 2, x * 3, x * 4]
peak = 0
for k in range(12000):
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum, name=("metrics_%d" % k) if k % 2 else None)
    if k % 500 == 0:
        for j, y in enumerate(ys):
            np.testing.assert_array_equal(y.asnumpy(), np.full((2,), total * (j + 1), "float32"))
        peak = max(peak, _core.queue_lines(0))
mx.nd.waitall()
peak = max(peak, _core.queue_lines(0))
print("rank %d: 12000 grouped calls of 4 new names each, at most %d lines kept" % (r, peak),
      flush=True)
assert peak <= 3 * 4096 + 4 * 500, "the core kept %d names' lines after 48,000 names" % peak

# Names reused every step still work after the sweeps (their lines erased and made again).
for step in range(3):
    ys = [hvd.allreduce(x, op=hvd.Sum, name="g.%d" % i) for i in range(50)]
    for y in ys:
        np.testing.assert_array_equal(y.asnumpy(), np.full((2,), total, "float32"))
print("RANK %d OK" % r, flush=True)
hvd.shutdown()
