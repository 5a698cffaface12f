"""A call refused at the call on one rank only (bad arguments that rank alone sees), caught
by the script there: the other ranks must get an error naming that rank and the reason
instead of waiting for it, and the next calls, unnamed ones included, must meet their
counterparts (a refused unnamed call used to leave that rank's numbering one behind, so its
next call was reduced with the peers' previous one: silently wrong numbers)."""
import os
import time

import mxnet as mx
import numpy as np

import mxhorovod as hvd
from support.expect import raises

hvd.init()
r, n = hvd.rank(), hvd.size()
BAD = 1  # the rank whose calls are refused
NAIVE = os.environ.get("MXNET_ENGINE_TYPE") == "NaiveEngine"  # errors raise at the call
ones = lambda *shape: mx.nd.ones(shape)  # noqa: E731


def refused_here(call):
    try:
        call()
    except Exception as e:  # TypeError, ValueError (InvalidArgumentError), MXNetError
        return e
    raise AssertionError("rank %d: the bad call was not refused" % r)


def unnamed_next(tag):
    """An unnamed Sum allreduce right after: every rank must get its own call's sum."""
    y = hvd.allreduce(ones(3) * (r + 1), op=hvd.Sum)
    np.testing.assert_array_equal(y.asnumpy(), np.full((3,), n * (n + 1) / 2, "float32"),
                                  err_msg="after %s" % tag)


def case(tag, good, bad, peer_error_at_call=False, needles=()):
    """Rank BAD runs ``bad`` (refused there); the others run ``good`` and must fail naming
    rank BAD (at the call for allgather/alltoall, which wait for the peers' sizes, and
    under NaiveEngine)."""
    want = ("failed on rank %d" % BAD, "refused at the call") + tuple(needles)
    if r == BAD:
        e = refused_here(bad)
        for s in needles:
            assert s in str(e), (tag, str(e))
    elif peer_error_at_call or NAIVE:
        raises(good, *want)
    else:
        out = good()
        outs = out if isinstance(out, list) else [out]
        raises(lambda: [o.asnumpy() for o in outs], *want)
    unnamed_next(tag)


case("unnamed non-NDArray", lambda: hvd.allreduce(ones(3), op=hvd.Sum),
     lambda: hvd.allreduce([1, 2, 3], op=hvd.Sum), needles=("expects an mxnet NDArray",))
case("named bad op", lambda: hvd.allreduce_(ones(2), name="g.op"),
     lambda: hvd.allreduce_(ones(2), name="g.op", op=9), needles=("unknown reduce op",))
case("bad prescale", lambda: hvd.allreduce(ones(2), name="g.pre", prescale_factor=0.5),
     lambda: hvd.allreduce(ones(2), name="g.pre", prescale_factor="half"),
     needles=("prescale_factor",))
case("sparse input (refused by the core)",
     lambda: hvd.allreduce(ones(4, 2), name="g.sparse"),
     lambda: hvd.allreduce(ones(4, 2).tostype("row_sparse"), name="g.sparse"))
case("grouped, one element not an NDArray",
     lambda: hvd.grouped_allreduce([ones(2), ones(3)]),
     lambda: hvd.grouped_allreduce([ones(2), np.ones(3)]))
case("broadcast root_rank 0.0", lambda: hvd.broadcast(ones(2), 0, name="b.root"),
     lambda: hvd.broadcast(ones(2), 0.0, name="b.root"), needles=("root_rank",))
case("broadcast root outside the job (refused by the core)",
     lambda: hvd.broadcast(ones(2), 0), lambda: hvd.broadcast(ones(2), n + 5),
     needles=("root_rank %d" % (n + 5),))
case("allgather non-NDArray", lambda: hvd.allgather(ones(2, 2)),
     lambda: hvd.allgather(np.ones((2, 2))), peer_error_at_call=True)
case("alltoall splits too large",
     lambda: hvd.alltoall(ones(n, 2), splits=[1] * n, name="a.splits"),
     lambda: hvd.alltoall(ones(n, 2), splits=[2] * n, name="a.splits"),
     peer_error_at_call=True, needles=("splits add up",))
case("reducescatter Max", lambda: hvd.reducescatter(ones(n, 2), op=hvd.Sum),
     lambda: hvd.reducescatter(ones(n, 2), op=hvd.Max), needles=("only hvd.Sum",))
case("grouped reducescatter, bad priority",
     lambda: hvd.grouped_reducescatter([ones(n), ones(2 * n)], op=hvd.Sum),
     lambda: hvd.grouped_reducescatter([ones(n), ones(2 * n)], op=hvd.Sum, priority="high"),
     needles=("priority",))

# A name the peers answer from the response cache: the refusal evicts it everywhere, so
# their call fails at once (their cache hit used to wait for the refused request until the
# stall check resent it: 60 s by default, with a stall warning).
for _ in range(2):
    hvd.allreduce(ones(2), name="g.cached", op=hvd.Sum).wait_to_read()
start = time.monotonic()
case("refused, cached on the peers", lambda: hvd.allreduce(ones(2), name="g.cached", op=hvd.Sum),
     lambda: hvd.allreduce(ones(2), name="g.cached", op=hvd.Adasum, prescale_factor=2.0),
     needles=("Adasum takes no prescale_factor",))
assert time.monotonic() - start < 30, "the peers waited for the stall check"

# The same refusal on every rank (the usual case: one script, one bug): each rank raises
# at the call, nothing waits, and the job goes on.
refused_here(lambda: hvd.allreduce([1.0], name="everywhere"))
refused_here(lambda: hvd.broadcast(ones(2), n + 1))
unnamed_next("refused everywhere")

hvd.shutdown()
print("RANK %d OK" % r, flush=True)
