"""Under MXNet's NaiveEngine (MXNET_ENGINE_TYPE=NaiveEngine), which runs every operation
inside the call and drops the error an asynchronous operation completes with, a failed
collective raises MXNetError at the call, naming the tensor, on every rank, for every dtype
and for grouped calls; correct calls give correct values and the next call works."""
import os

import mxnet as mx
import numpy as np

import mxhorovod as hvd
from support.expect import raises, works

assert os.environ.get("MXNET_ENGINE_TYPE") == "NaiveEngine"
hvd.init()
r, n = hvd.rank(), hvd.size()


works("first")
for dt in ("float32", "int32"):
    raises(lambda: hvd.allreduce(mx.nd.ones((3 + (r > 0),), dtype=dt), name="naive." + dt),
           "naive." + dt, "shapes")
    works(dt)
grp = [mx.nd.ones((2,)), mx.nd.ones((3 + (r > 0),), dtype="int64")]
raises(lambda: hvd.grouped_allreduce_(grp, name="naive.group"), "naive.group.1", "shapes")
assert np.isnan(grp[0].asnumpy()).all(), grp[0]
works("group")
raises(lambda: hvd.broadcast(mx.nd.ones((3,)), root_rank=0 if r == 0 else n - 1, name="naive.root"),
       "naive.root", "root")
works("root")
g = hvd.allgather(mx.nd.ones((r + 1, 2)) * r, name="naive.gather")
np.testing.assert_array_equal(g.asnumpy()[:, 0], np.repeat(np.arange(n), np.arange(1, n + 1)))
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
