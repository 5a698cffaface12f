"""Stall inspector scenarios on 2 ranks (argv[1]); the test reads the log lines.

warn: HOROVOD_STALL_CHECK_TIME_SECONDS=1. Rank 1 is 3.5 s late for a new name, then 4.5 s
      late for a name agreed through the response cache; both complete with the right
      values after rank 0 warned about them.
same_name: the same settings as shutdown; rank 0 calls allreduce 'mixed', rank 1 allgather
      'mixed': the errors say the ranks made different calls under one name.
order: the same settings; rank 0 calls allgather 'first' then alltoall 'second', rank 1 the
      other way round: the errors say the ranks made their calls in different orders.
shutdown: HOROVOD_STALL_CHECK_TIME_SECONDS=1, HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=2. Each
      rank waits on a name the other never submits (plus rank 0 on a cached name): every
      pending operation fails on its rank with an error naming it and the missing rank,
      mxhorovod stops everywhere, and both processes end normally.
Prints RANK <r> OK at the end."""
import sys
import time

import mxnet as mx
import numpy as np
from mxnet.base import MXNetError

import mxhorovod as hvd

mode = sys.argv[1]
hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == 2


def expect_error(arr, *needles):
    try:
        arr.asnumpy()
    except MXNetError as e:
        for s in needles:
            assert s in str(e), "expected %r in: %s" % (s, e)
        return str(e)
    raise AssertionError("no error; wanted %s" % (needles,))


if mode == "warn":
    if r == 1:
        time.sleep(3.5)
    y = hvd.allreduce(mx.nd.ones((3,)) * (r + 1), op=hvd.Sum, name="stall.uncached")
    np.testing.assert_array_equal(y.asnumpy(), np.full(3, 3, "float32"))
    print("RANK %d uncached done" % r, flush=True)
    for step in range(2):
        if r == 1 and step == 1:
            time.sleep(4.5)
        y = hvd.allreduce(mx.nd.ones((2,)) * (r + 1), op=hvd.Sum, name="stall.cached")
        np.testing.assert_array_equal(y.asnumpy(), np.full(2, 3, "float32"))
    hvd.shutdown()
elif mode == "shutdown":
    hvd.allreduce(mx.nd.ones((2,)), name="cached.never").asnumpy()  # now in the cache
    t0 = time.time()
    if r == 0:
        a = hvd.allreduce(mx.nd.ones((4,)), name="never.by.1")
        c = hvd.allreduce(mx.nd.ones((2,)), name="cached.never")  # a cache hit that waits
        expect_error(a, "allreduce 'never.by.1'", "missing ranks 1", "submitted by 1 of 2 ranks: 0",
                     "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=2.0")
        expect_error(c, "'cached.never'", "missing ranks 1", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")
    else:
        b = hvd.broadcast(mx.nd.ones((4,)), root_rank=0, name="never.by.0")
        expect_error(b, "broadcast 'never.by.0'", "missing ranks 0", "submitted by 1 of 2 ranks: 1",
                     "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=2.0")
    waited = time.time() - t0
    assert 1.5 < waited < 30, waited
    # mxhorovod stopped on every rank: calls are refused, naming the stall.
    assert not hvd.is_initialized()
    try:
        hvd.allreduce(mx.nd.ones(2), name="after.stall")
        raise AssertionError("call accepted after the stall shutdown")
    except ValueError as e:
        assert "stalled" in str(e) and "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" in str(e), str(e)
    print("RANK %d waited %.1f s" % (r, waited), flush=True)
elif mode == "same_name":
    # Rank 0 calls grouped_allreduce 'mixed' (its tensors are 'mixed.0' and 'mixed.1'),
    # rank 1 allreduce 'mixed': the two never meet (a hang, before the stall shutdown). The
    # warning and each rank's error say that the ranks made different calls under 'mixed'.
    # (Different kinds of collective under one name meet: core_errors.py.)
    hint = "the ranks made different calls under the name 'mixed'"
    if r == 0:
        outs = hvd.grouped_allreduce([mx.nd.ones((2,)), mx.nd.ones((3,))], name="mixed")
        expect_error(outs[0], "allreduce 'mixed.0'", hint, "ranks 1 submitted allreduce 'mixed'")
    else:
        a = hvd.allreduce(mx.nd.ones((2,)), name="mixed")
        expect_error(a, "allreduce 'mixed'", hint, "ranks 0 submitted allreduce 'mixed.0'")
    assert not hvd.is_initialized()
elif mode == "order":
    # Rank 0 calls allgather 'first' then alltoall 'second', rank 1 the other way round
    # (a loop over a set whose order differs by process): allgather and alltoall return
    # only when every rank has sent its size, so each rank waits in its own first call (a
    # hang, as in Horovod, before the stall shutdown). The warning and each rank's error
    # say that the ranks made their calls in different orders.
    hint = "the ranks made their calls in different orders"
    calls = [lambda: hvd.allgather(mx.nd.ones((r + 1, 2)), name="first"),
             lambda: hvd.alltoall(mx.nd.ones((2 * n,)), name="second")]
    try:
        for call in (calls if r == 0 else calls[::-1]):
            call()
        raise AssertionError("calls in different orders completed")
    except MXNetError as e:
        mine = "wait in allgather 'first'" if r == 0 else "wait in alltoall 'second'"
        assert hint in str(e) and "same order on every rank" in str(e), str(e)
        assert mine in str(e) or "submitted %s" % ("allgather 'first'" if r == 0 else
                                                  "alltoall 'second'") in str(e), str(e)
    assert not hvd.is_initialized()
else:
    raise SystemExit("unknown mode " + mode)
print("RANK %d OK" % r, flush=True)
