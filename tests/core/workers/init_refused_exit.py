"""init() refused after MPI has started (a setting that differs between ranks, a rank out
of range in init(comm=[...])), then each rank ends normally, rank 0 first: every rank must
finish with exit status 0. Before, MPI was never finalized after such a refusal, and the
launcher killed the ranks still running when rank 0 ended (SIGKILL, exit status 9)."""
import os
import time

import mxhorovod as hvd

rank = int(os.environ["PMI_RANK"])
os.environ["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1" if rank == 0 else "0"
try:
    hvd.init()
except ValueError as e:
    assert "HOROVOD_HIERARCHICAL_ALLREDUCE differs between ranks" in str(e), e
else:
    raise AssertionError("init() accepted a setting that differs between ranks")
del os.environ["HOROVOD_HIERARCHICAL_ALLREDUCE"]
try:
    hvd.init(comm=[0, 99])
except ValueError as e:
    assert "rank 99 is out of range (the parent communicator has" in str(e), e
else:
    raise AssertionError("init(comm=[0, 99]) accepted")
try:
    hvd.init(comm=[0, 1.0])
except ValueError as e:
    assert "ranks must be integers, not float" in str(e), e
else:
    raise AssertionError("init(comm=[0, 1.0]) accepted")
print("RANK %d OK" % rank, flush=True)
if rank != 0:
    time.sleep(3)  # rank 0 ends first
