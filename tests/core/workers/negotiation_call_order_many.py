"""Many calls of one name in flight at once (none waited for): every result its own call's,
in time linear in their number; then thousands parked at shutdown all fail without
crashing the background thread (their failures admit each other: no deep recursion); two
threads calling one name on one array finish. Prints RANK <r> OK."""
import sys
import threading
import time

import mxnet as mx
import numpy as np
from mxnet.base import MXNetError

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
total = n * (n + 1) / 2

# 6,000 calls of one name with no wait: each completion admits the next (against the first
# form of the lines, which scanned every parked call at each completion, 16,000 took 23 s).
count = 6000
t0 = time.time()
outs = [hvd.allreduce(mx.nd.ones(1) * (r + 1) * k, op=hvd.Sum, name="m") for k in range(count)]
got = np.array([o.asnumpy()[0] for o in outs])
np.testing.assert_array_equal(got, total * np.arange(count, dtype="float32"))
print("rank %d: %d calls of one name in %.1f s" % (r, count, time.time() - t0), flush=True)

# Two threads, one name, one array: in-place and out-of-place calls interleaved.
v = mx.nd.ones(4) * (r + 1)


def inplace():
    for _ in range(200):
        hvd.allreduce_(v, op=hvd.Max, name="x")


def copies():
    for _ in range(200):
        hvd.allreduce(v, op=hvd.Max, name="x")


threads = [threading.Thread(target=inplace), threading.Thread(target=copies)]
for t in threads:
    t.start()
for t in threads:
    t.join()
mx.nd.waitall()
np.testing.assert_array_equal(v.asnumpy(), np.full(4, n, "float32"))

# 20,000 calls of a name parked behind one the last rank never makes; shutdown fails them
# all (against 78abd51 the background thread overflowed its stack here: SIGSEGV). The last
# rank's shutdown comes first (this rank's waits for its called collectives, 56d209a), so
# they fail as stopped by that peer.
if r != n - 1:
    parked = [hvd.allreduce(mx.nd.ones(1), name="never") for _ in range(20000)]
hvd.allreduce(mx.nd.ones(1), name="before.shutdown").wait_to_read()
hvd.shutdown()
if r != n - 1:
    for x in parked:  # every one read (MXNet would raise an unread error again at exit)
        try:
            x.asnumpy()
        except MXNetError as e:
            assert "allreduce 'never' did not run: a peer rank shut down mxhorovod (rank %d: " \
                % (n - 1) in str(e), str(e)[:300]
        else:
            raise AssertionError("a parked call did not fail: %s" % x.asnumpy())
print("RANK %d OK" % r, flush=True)
sys.stdout.flush()
