"""Automatic names on process sets that come and go, and across shutdown() / init().

Unnamed calls are numbered per kind and per process set id (mxhorovod/common/naming.py). Ids are
unique only within one session of the core: every init() numbers its sets from 1 again. So
(1) the numbers of a removed set must not stay behind (an add/remove loop kept one counter
per removed set and kind forever), and (2) a set that gets an id back in a new session must
number its calls from 0 on every member: before, a rank that had made unnamed calls on the
old set of that id named its first call '.2' where a rank that had not named it '.0', and
the set's members waited for each other forever.

Run on 3 ranks (the session part needs a set whose members differ from the old one's) with
HOROVOD_STALL_CHECK_TIME_SECONDS / HOROVOD_STALL_SHUTDOWN_TIME_SECONDS set, so a mismatch
fails instead of hanging. Prints RANK <r> OK at the end."""
import mxnet as mx

import mxhorovod as hvd
from mxhorovod.common import naming

hvd.init(process_sets="dynamic")
r, n = hvd.rank(), hvd.size()
assert n == 3, "run on 3 ranks"
x = mx.nd.ones((4,))


def unnamed_sum(ps, calls=1):
    """`calls` unnamed allreduces on ps (and an unnamed broadcast); checks the sums."""
    for _ in range(calls):
        got = hvd.allreduce(x, op=hvd.Sum, process_set=ps).asnumpy()
        assert (got == ps.size()).all(), (r, ps, got)
    got = hvd.broadcast(x * (r + 1), root_rank=ps.ranks[0], process_set=ps).asnumpy()
    assert (got == ps.ranks[0] + 1).all(), (r, ps, got)


def set_counters():
    """The naming counters of sets other than the global one."""
    return {key for key in naming._counters if key[1] != 0}


# (1) An add/remove loop with unnamed calls leaves no counters of removed sets behind.
for i in range(30):
    ps = hvd.add_process_set([i % n, (i + 1) % n])
    if ps.included():
        unnamed_sum(ps)
    hvd.remove_process_set(ps)
    assert not set_counters(), (r, i, sorted(naming._counters))
hvd.allreduce(x, name="sync.1").wait_to_read()

# (2) A new session gives set id 1 to other members: the counters start from 0 again.
ps = hvd.add_process_set([0, 1])
assert ps.process_set_id is not None
if ps.included():
    unnamed_sum(ps, calls=2)  # ranks 0 and 1 number their set's calls .0 and .1
hvd.allreduce(x, name="sync.2").wait_to_read()
hvd.shutdown()

hvd.init(process_sets="dynamic")
ps = hvd.add_process_set([1, 2])
assert ps.process_set_id == 1, ps  # the id of the old set [0, 1]
if ps.included():
    unnamed_sum(ps, calls=3)  # rank 1 numbered from 2 here before: a hang
hvd.allreduce(x, name="sync.3").wait_to_read()
hvd.shutdown()

# The same with static sets: init(process_sets=[...]) numbers them from 1 in each session.
def static_session(ps, calls, sync):
    """init(process_sets=[ps]): ps gets id 1; `calls` unnamed calls on it, then a global
    call named `sync`."""
    hvd.init(process_sets=[ps])
    assert ps.process_set_id == 1, ps
    if ps.included():
        unnamed_sum(ps, calls=calls)
    hvd.allreduce(x, name=sync).wait_to_read()


a = hvd.ProcessSet([0, 2])
static_session(a, 2, "sync.4")
hvd.shutdown()
b = hvd.ProcessSet([1, 2])
static_session(b, 2, "sync.5")

# (3) A set of an earlier session has no id any more: `a` kept id 1 before, which now names
# b = [1, 2], so a collective on `a` ran on b's ranks (rank 0, a member of `a`, was told
# it is not in the set). Now every rank raises "not registered".
assert a.process_set_id is None and ps.process_set_id is None, (a, ps)
assert a.included() is None and a.size() is None, a
try:
    hvd.allreduce(x, op=hvd.Sum, process_set=a)
    raise AssertionError("a set of an earlier session was used: %s" % a)
except ValueError as e:
    assert "is not registered" in str(e), str(e)
hvd.allreduce(x, name="sync.6").wait_to_read()
hvd.shutdown()
assert b.process_set_id is None, b  # shutdown() ends the session's ids too
# Passed to init() again, the old object is registered afresh and works.
static_session(a, 1, "sync.7")

print("RANK %d OK" % r, flush=True)
hvd.shutdown()
