"""Settings that decide which MPI calls a cycle makes, set differently on rank 0: init()
must fail on every rank naming the variable and the ranks' values (before: wrong sums,
"Message truncated" aborts, SIGSEGV or a hang), and init() works again once they agree.
MXHOROVOD_BLOCKING_DATA is agreed instead (nonblocking when any rank asks): the job runs
and every value is right (before: a hang). A value that some ranks cannot read fails init()
on every rank too."""
import os

import mxnet as mx
import numpy as np

import mxhorovod as hvd

rank = int(os.environ["PMI_RANK"])
n = int(os.environ["PMI_SIZE"])

CASES = [
    ("HOROVOD_FUSION_THRESHOLD", "0", "134217728"),
    ("HOROVOD_CACHE_CAPACITY", "0", "1024"),
    ("MXHOROVOD_SLICE_BYTES", "1024", "4194304"),
    ("MXHOROVOD_ZERO_COPY_BYTES", "0", "65536"),
    ("HOROVOD_AUTOTUNE", "1", "0"),
    ("HOROVOD_DYNAMIC_PROCESS_SETS", "1", "0"),
]


def collectives(tag):
    """Small (fused), medium and sliced allreduces, with the values checked."""
    sizes = [7 + i for i in range(20)] + [51200, 51200, 3 << 20]
    outs = [hvd.allreduce(mx.nd.full((s,), float(rank + 1 + i)), op=hvd.Sum, name="%s.%d" % (tag, i))
            for i, s in enumerate(sizes)]
    for i, o in enumerate(outs):
        want = sum(k + 1 + i for k in range(n))
        np.testing.assert_array_equal(np.unique(o.asnumpy()), [want])


for var, on_rank0, elsewhere in CASES:
    os.environ[var] = on_rank0 if rank == 0 else elsewhere
    try:
        hvd.init()
    except ValueError as e:
        want = "differs between ranks: %s on ranks 0, %s on ranks %s" % (
            on_rank0, elsewhere, ", ".join(str(r) for r in range(1, n)))
        assert str(e).startswith(var) and want in str(e), (var, want, str(e))
    else:
        raise AssertionError("rank %d: init() accepted %s differing between ranks" % (rank, var))
    assert not hvd.is_initialized()
    del os.environ[var]

# The same variable on every rank again: init() works.
hvd.init()
collectives("agreed")
hvd.shutdown()

# A bad autotune sample size is refused at init() (was an uncaught C++ exception on the
# background thread: every rank aborted).
os.environ["HOROVOD_AUTOTUNE"] = "1"
os.environ["HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"] = "many"
try:
    hvd.init()
except ValueError as e:
    assert "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE='many'" in str(e), e
else:
    raise AssertionError("init() accepted HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=many")
del os.environ["HOROVOD_AUTOTUNE"], os.environ["HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"]

# A value that only some ranks cannot read: init() fails on every rank, the others naming
# the rank and its variable (before: that rank refused before MPI started, and the others
# waited for it in init() forever).
for var, bad, bad_rank in [("HOROVOD_CYCLE_TIME", "abc", n - 1), ("HOROVOD_LOG_LEVEL", "loud", 0)]:
    if rank == bad_rank:
        os.environ[var] = bad
    try:
        hvd.init()
    except ValueError as e:
        mine = "%s='%s' is not" % (var, bad)
        if rank == bad_rank:
            assert str(e).startswith(mine), (rank, str(e))
        else:
            want = "other ranks could not read their settings (rank %d: %s" % (bad_rank, mine)
            assert want in str(e), (rank, str(e))
    else:
        raise AssertionError("rank %d: init() accepted %s=%r on rank %d" % (rank, var, bad, bad_rank))
    assert not hvd.is_initialized()
    os.environ.pop(var, None)

# Blocking data calls asked for on some ranks only: agreed (nonblocking), no hang, right
# values.
os.environ["MXHOROVOD_BLOCKING_DATA"] = "0" if rank == 0 else "1"
hvd.init()
collectives("blocking")
for root in range(n):
    b = hvd.broadcast(mx.nd.full((300000,), float(rank)), root_rank=root, name="bc.%d" % root)
    np.testing.assert_array_equal(np.unique(b.asnumpy()), [root])
hvd.shutdown()
print("RANK %d OK" % rank, flush=True)
