"""Timeline on several ranks: HOROVOD_TIMELINE (argv[1]) records from init(), rank 0
writes it; then start_timeline/stop_timeline record a second file (argv[2]). Every value is
still checked; the test reads the files after the run. Prints RANK <r> OK at the end."""
import sys
import time

import mxnet as mx
import numpy as np
from mxnet.base import MXNetError

import mxhorovod as hvd
from mxhorovod import _core

env_path, dyn_path = sys.argv[1], sys.argv[2]
hvd.init()
r, n = hvd.rank(), hvd.size()
# As in Horovod, only rank 0 records.
assert _core.timeline_path() == (env_path if r == 0 else ""), _core.timeline_path()

total = n * (n + 1) / 2
for step in range(3):
    # One fused group and single tensors, every collective; the same names every step, so
    # steps after the first agree through the response cache.
    g = hvd.grouped_allreduce([mx.nd.ones((5,)) * (r + 1), mx.nd.ones((7,)) * (r + 1)],
                              op=hvd.Sum, name="grad")
    b = hvd.broadcast(mx.nd.ones((3,)) * (r + 1), root_rank=0, name="bcast")
    a = hvd.allgather(mx.nd.ones((r + 1, 2)) * r, name="gather")
    t = hvd.alltoall(mx.nd.arange(2 * n).reshape((2 * n, 1)) + 100 * r, name="a2a")
    for x in g:
        np.testing.assert_array_equal(x.asnumpy(), np.full(x.shape, total, "float32"))
    np.testing.assert_array_equal(b.asnumpy(), np.ones(3, "float32"))
    assert a.shape == (total, 2), a.shape
    np.testing.assert_array_equal(t.asnumpy()[:, 0], [100 * q + 2 * r + i for q in range(n) for i in range(2)])
    # The last rank is late for 'late': rank 0 records when each rank became ready.
    if r == n - 1:
        time.sleep(0.6)
    y = hvd.allreduce(mx.nd.ones((4,)) * r, op=hvd.Sum, name="late")
    np.testing.assert_array_equal(y.asnumpy(), np.full(4, n * (n - 1) / 2, "float32"))

# A negotiated error is recorded as an ERROR event.
bad = hvd.allreduce(mx.nd.ones((2,) if r == 0 else (3,)), name="mismatch")
try:
    bad.asnumpy()
    raise AssertionError("no mismatch error")
except MXNetError as e:
    assert "mismatch" in str(e)

# A second file, recorded between start_timeline() and stop_timeline().
try:
    hvd.start_timeline(dyn_path)  # HOROVOD_TIMELINE's file is still being recorded
    assert r != 0, "rank 0 started a second timeline"
except ValueError as e:
    assert r == 0 and "already being recorded" in str(e) and env_path in str(e), str(e)
hvd.stop_timeline()
if r == 0:
    try:
        hvd.start_timeline("/nonexistent-dir/x/timeline.json")
        raise AssertionError("bad path accepted")
    except ValueError as e:
        assert "cannot open" in str(e) and "/nonexistent-dir/x/timeline.json" in str(e), str(e)
hvd.start_timeline(dyn_path, mark_cycles=True)
assert _core.timeline_path() == (dyn_path if r == 0 else "")
z = hvd.allreduce(mx.nd.ones((6,)), op=hvd.Sum, name="dyn.x")
np.testing.assert_array_equal(z.asnumpy(), np.full(6, n, "float32"))
hvd.stop_timeline()
hvd.stop_timeline()  # idempotent
hvd.allreduce(mx.nd.ones((2,)), name="after.stop").asnumpy()
hvd.shutdown()
try:
    hvd.start_timeline(dyn_path)
    raise AssertionError("start_timeline accepted after shutdown")
except ValueError as e:
    assert "not been initialized" in str(e), str(e)
print("RANK %d OK" % r, flush=True)
