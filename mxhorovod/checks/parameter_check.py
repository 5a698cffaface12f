"""A warning when the ranks' trainable parameters stop being bit-identical.

Every ``MXHOROVOD_PARAMETER_CHECK_STEPS``-th update (default 100; 0: off) of
``DistributedTrainer``, and of a ``gluon.Trainer`` over kvstore 'horovod' or with a
``DistributedOptimizer``, each rank of the trainer's process set takes a CRC-32 of the bytes
of every trainable parameter (``grad_req`` not 'null': BatchNorm's running statistics, which
differ by rank by design, are left out), as the update is about to run, and submits one
int64 allreduce (Max) of the digests and their complements, named
``<trainer prefix>parameters``: the ranks agree on a parameter exactly when both maxima
match. It is read two updates later, when it has long completed: the step never waits for
the peers. Reading the weights waits for this rank's previous update (usually done) and
costs about 0.5 ms per MB of parameters (copy and CRC; ResNet-50: 54 ms), once per check.

A mismatch warns once per trainer, on every rank of the set, naming the step, the first
parameter that differs (its number and this rank's name for it), which ranks hold which
value (one blocking Max allreduce of a row of digests per rank, made once) and how many parameters
differ; the trainer then checks no more. The last checks are read at ``hvd.shutdown()`` or
exit (a mismatch found there names no ranks: the peers may be gone); those of a freed
trainer are dropped.
"""
import collections
import os
import weakref
import zlib

import mxnet as mx
import numpy as np

from mxhorovod.collectives.join import after_join, identity_when_joined
from mxhorovod.collectives.ops import Max, allreduce
from mxhorovod.common.basics import after_local_work, rank, size
from mxhorovod.common.process_sets import global_process_set
from mxhorovod.common.user_warning import warn_user

__all__ = ["ParameterCheck", "check_steps"]

ENV = "MXHOROVOD_PARAMETER_CHECK_STEPS"
DEFAULT_STEPS = 100
_LAG = 2  # as mxhorovod.checks.batch_check: the result of two updates ago has completed
_live = weakref.WeakSet()


def check_steps(environ=os.environ):
    """The number of updates between two checks, from ``MXHOROVOD_PARAMETER_CHECK_STEPS``
    (0: off).

    Raises:
        ValueError: the variable is set to something else than an integer >= 0.
    """
    text = environ.get(ENV, "").strip()
    if not text:
        return DEFAULT_STEPS
    try:
        steps = int(text)
    except ValueError:
        steps = -1
    if steps < 0:
        raise ValueError("%s=%r: expected an integer >= 0 (the updates between two checks "
                         "of the ranks' parameters; 0: off)" % (ENV, text))
    return steps


def _digests(arrays):
    """One CRC-32 per array, of its bytes (in the plain layout, whatever MKLDNN holds)."""
    out = np.empty(len(arrays), dtype=np.int64)
    for k, a in enumerate(arrays):
        out[k] = zlib.crc32(np.ascontiguousarray(a.asnumpy()).view(np.uint8).reshape(-1))
    return out


def _ranks_text(ranks):
    return ("rank %d" % ranks[0] if len(ranks) == 1 else
            "ranks " + ", ".join(str(r) for r in ranks[:8]) +
            (", ... (%d in all)" % len(ranks) if len(ranks) > 8 else ""))


def _realign():
    # After hvd.join() the ranks stand at the same point, though uneven data gave them
    # different numbers of updates: each check counts anew from here, so the ranks still
    # compare their parameters at the same update.
    for check in list(_live):
        check._base = check._count


after_join(_realign)


class ParameterCheck(object):
    """One per trainer: ``step(params, name, process_set, label)`` at every update, on every
    rank of the set alike, before the update is queued. ``params``: the trainer's
    parameter list (a parameter's number is its index there)."""

    def __init__(self, steps=None):
        self.steps = check_steps() if steps is None else int(steps)
        self._count = 0  # updates seen
        self._base = 0   # _count at the last hvd.join(): checks count from there
        self._pending = collections.deque()  # (result, digests, update, name, set, label, names)
        self.warned = False
        _live.add(self)

    def step(self, params, name, process_set, label):
        self._count += 1
        while self._pending and self._count - self._pending[0][2] >= _LAG:
            self._read_oldest()
        if self.warned or not self.steps or (self._count - self._base) % self.steps:
            return
        trained = [(i, p) for i, p in enumerate(params) if p.grad_req != "null"]
        digests = _digests([p.list_data()[0] for _, p in trained])
        both = np.concatenate([digests, ~digests]).reshape(1, -1)
        # A numpy-backed input: mx.nd.array would wait in the engine behind the backward.
        # A rank that has joined (hvd.join()) adds the lowest int64: left out of the Max.
        with identity_when_joined():
            result = allreduce(mx.nd.from_numpy(both, zero_copy=True), op=Max, name=name,
                               process_set=process_set)
        names = [(i, p.name) for i, p in trained]
        self._pending.append((result, both, self._count, name, process_set, label, names))

    def _read_oldest(self, final=False):
        result, both, count, name, process_set, label, names = self._pending.popleft()
        if self.warned:
            return
        got = result.asnumpy().reshape(-1)
        n = len(names)
        differ = np.nonzero(got[:n] != ~got[n:])[0]
        if not len(differ):
            return
        self.warned = True
        self._pending.clear()
        k = int(differ[0])
        index, pname = names[k]
        holders = "its value differs between the ranks"
        if not final:
            # Which ranks hold what: every rank of the set reads this check at the same
            # update and finds the same mismatch, so all of them make this one blocking call
            # (not at shutdown: the peers may be gone).
            # A Max allreduce of one row per rank (the others' rows the lowest int64), not
            # an allgather: it runs while a rank has joined (hvd.join()), whose row stays
            # the lowest.
            ranks = process_set.ranks if process_set is not global_process_set and \
                process_set.ranks else list(range(size()))
            low = np.iinfo(np.int64).min
            rows = np.full((len(ranks), n), low, dtype=np.int64)
            rows[ranks.index(rank())] = both[0, :n]
            with identity_when_joined():
                every = allreduce(mx.nd.from_numpy(rows, zero_copy=True), op=Max,
                                  name=name + ".ranks", process_set=process_set).asnumpy()
            groups = collections.OrderedDict()
            for r, value in zip(ranks, every[:, k]):
                if int(value) != low:  # a joined rank holds no value here
                    groups.setdefault(int(value), []).append(r)
            holders = "the ranks hold %d different values (%s)" % (
                len(groups), "; ".join(_ranks_text(rs) for rs in groups.values()))
        warn_user(
            "%s: at update %d the ranks' trainable parameters are no longer identical: "
            "parameter %d ('%s' on rank %d): %s; trainable parameters that differ: %d of %d. "
            "The ranks now train different models. Causes: a parameter changed on some ranks "
            "only (set_data, load_parameters or initialize after the broadcast), parameters "
            "never broadcast from one rank (hvd.broadcast_parameters), or updates that are "
            "not deterministic. Checked every %s=%d updates, without BatchNorm's running "
            "statistics (grad_req 'null'); this warning is given once per trainer."
            % (label, count, index, pname, rank(), holders, len(differ), n, ENV, self.steps))

    def read_all(self, final=False):
        while self._pending:
            self._read_oldest(final)


def check_last_updates():
    """Reads the pending checks of every live trainer (at ``hvd.shutdown()`` and exit,
    after this rank's collectives have run) and forgets them. Never raises."""
    for check in list(_live):
        try:
            check.read_all(final=True)
        except Exception:  # noqa: BLE001 - the collective failed with the job
            check._pending.clear()


after_local_work(check_last_updates)
