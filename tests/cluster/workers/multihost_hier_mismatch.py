"""HOROVOD_HIERARCHICAL_ALLREDUCE on for ranks 0 and 1 only: init() must fail on every
rank with both lists of ranks (ranks that disagree would call different collectives and
hang). Then the same setting everywhere: init() works and the allreduce is right."""
import os

import mxnet as mx

import mxhorovod as hvd

rank = int(os.environ["PMI_RANK"])
os.environ["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1" if rank < 2 else "0"
try:
    hvd.init()
except ValueError as e:
    print("RANK %d init refused: %s" % (rank, e), flush=True)
    assert "HOROVOD_HIERARCHICAL_ALLREDUCE differs between ranks" in str(e), e
else:
    raise AssertionError("rank %d: init() accepted a setting that differs between ranks" % rank)
assert not hvd.is_initialized()

os.environ["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
hvd.init()
n = hvd.size()
y = hvd.allreduce(mx.nd.array([rank + 1.0]), op=hvd.Sum, name="after.mismatch")
assert y.asnumpy().tolist() == [n * (n + 1) / 2], y.asnumpy()
hvd.shutdown()
print("RANK %d OK" % rank, flush=True)
