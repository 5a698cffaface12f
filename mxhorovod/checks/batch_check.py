"""A warning when the ranks step with different batch sizes, learning rates or weight
decays: their updates differ, and their weights drift apart.

Checked at every ``step`` / ``update`` of ``DistributedTrainer``, and of a ``gluon.Trainer``
over kvstore 'horovod' or with a ``DistributedOptimizer``.
Each step submits one 64-byte float64 allreduce (Max) of the values and their negatives,
named ``<trainer prefix>batch_size``, so the range over the ranks comes back.
It is read two steps later, when it has long completed: the step never waits for the peers.
Its input wraps a numpy array (``mx.nd.from_numpy``): ``mx.nd.array`` would wait in MXNet's
engine behind the step's backward.
The last two steps are read at ``hvd.shutdown()`` or exit; those of a freed trainer two
steps of another trainer later, or at shutdown.
The learning rate is the optimizer's ``lr``, or its ``lr_scheduler``'s ``base_lr``: a
scheduler is never called here.
A mismatch warns once per trainer, on every rank, naming the step, this rank's value and
the range over the ranks; NaN on every rank is no mismatch.
``DistributedTrainer.step`` sends no batch size (it divides by the ranks' total).
A rank that has joined (``hvd.join()``) adds -inf (mxhorovod's checks only: a public Max
allreduce fails while a rank is joined, as Horovod's does).
"""
import collections
import math
import weakref

import mxnet as mx
import numpy as np

from mxhorovod.collectives.join import identity_when_joined
from mxhorovod.collectives.ops import Max, allreduce
from mxhorovod.common.basics import after_local_work, rank
from mxhorovod.common.user_warning import warn_user

# A step reads the check of the step before the last one: long completed (the last step's
# may still be waiting for backward, and reading it would stop Python from running ahead).
_LAG = 2
_live = weakref.WeakSet()  # the checks of this process, for check_last_steps
# The pending checks of freed trainers, each with the steps of other trainers since: a
# trainer replaced by another lost the warning of its last steps (helper review, a second
# phase of training with a new DistributedTrainer: the ranks' weights differed silently).
_orphans = []  # [_Checks, steps since it was freed]


def _finite_pair(value):
    """(value, -value) when it is a finite number, else (-inf, -inf): left out of the range."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return (-math.inf, -math.inf)
    return (v, -v) if math.isfinite(v) else (-math.inf, -math.inf)


def _lr_and_wd(optimizer):
    """The optimizer's learning rate (its ``lr``, or its scheduler's ``base_lr``, read, not
    called) and weight decay; None where there is no optimizer."""
    if optimizer is None:
        return None, None
    inner = getattr(optimizer, "_optimizer", None)  # a DistributedOptimizer's
    opt = inner if isinstance(inner, mx.optimizer.Optimizer) else optimizer
    scheduler = getattr(opt, "lr_scheduler", None)
    lr = getattr(scheduler, "base_lr", None) if scheduler is not None else getattr(opt, "lr", None)
    return lr, getattr(opt, "wd", None)


class _Checks(object):
    """The submitted, unread checks of one trainer and whether it has warned: what outlives
    the trainer (kept apart from BatchSizeCheck so that freeing it can hand them on)."""

    def __init__(self, label):
        self.label = label
        self.pending = collections.deque()  # (result NDArray, size, lr, wd, step, method)
        self.warned = False

    def check_oldest(self):
        result, size, lr, wd, step, method = self.pending.popleft()
        if self.warned:
            return
        got = result.asnumpy().tolist()
        largest, smallest, any_nan, any_finite = got[0], -got[1], got[2], got[3]
        found = []
        if any_finite and (any_nan or largest != smallest):
            over = "from %g to %g" % (smallest, largest) + (", and nan," if any_nan else "")
            found.append("passed different batch sizes (this rank, %d, %g; %s over the ranks): "
                         "each rank divides the averaged gradient by its own; give every rank "
                         "the same number of samples per step (examples/distributed_data.py's "
                         "ShardSampler with last_batch='discard')" % (rank(), size, over))
        for what, mine, high, negated_low in (("learning rates", lr, got[4], got[5]),
                                              ("weight decays", wd, got[6], got[7])):
            if math.isfinite(high) and high != -negated_low:
                found.append("stepped with different %s (this rank, %d, %s; from %g to %g over "
                             "the ranks): set them alike on every rank (set_learning_rate() or "
                             "an lr_scheduler on some ranks only?)"
                             % (what, rank(), mine, -negated_low, high))
        if found:
            self.warned = True
            warn_user("%s.%s(batch_size): at step %d the ranks %s. Their weights now differ."
                      % (self.label, method, step, "; and ".join(found)))

    def read_all(self):
        while self.pending:
            self.check_oldest()


def _keep_unread(checks):
    # weakref.finalize of a BatchSizeCheck: never reads here (a collector's pass must not
    # wait for MXNet's engine); the next trainers' steps or shutdown read them.
    if checks.pending and not checks.warned:
        _orphans.append([checks, 0])


def _read_orphans():
    """Counts a step of some trainer for each freed trainer's checks, and reads those that
    are _LAG such steps old (check_last_steps reads the rest)."""
    for entry in list(_orphans):
        entry[1] += 1
        if entry[1] >= _LAG:
            _orphans.remove(entry)
            entry[0].read_all()


class BatchSizeCheck(object):
    """One per trainer: ``submit(batch_size, name, process_set, method, optimizer)`` at every
    ``step`` or ``update`` (``method``, for the warning), on every rank of the set alike.
    ``label``: the trainer's class, for the warning."""

    def __init__(self, label="DistributedTrainer"):
        self._checks = _Checks(label)
        self._mine = (None, None)  # (its values, the NDArray): reused while they are the same
        self._steps = 0
        _live.add(self)
        weakref.finalize(self, _keep_unread, self._checks).atexit = False

    def submit(self, batch_size, name, process_set, method="step", optimizer=None):
        self._steps += 1
        if _orphans:
            _read_orphans()
        checks = self._checks
        if len(checks.pending) >= _LAG:
            checks.check_oldest()
        if checks.warned:
            return  # warned once: no more collectives for it
        # None: not compared (DistributedTrainer.step divides by the ranks' total).
        size = math.inf if batch_size is None else float(batch_size)
        lr, wd = _lr_and_wd(optimizer)
        values = ((-math.inf, -math.inf, 0.0, 0.0) if batch_size is None else
                  (-math.inf, -math.inf, 1.0, 0.0) if math.isnan(size) else (size, -size, 0.0, 1.0)) \
            + _finite_pair(lr) + _finite_pair(wd)
        if values != self._mine[0]:
            self._mine = (values, mx.nd.from_numpy(np.array(values, dtype=np.float64),
                                                   zero_copy=True))
        with identity_when_joined():  # a joined rank adds -inf: left out of the range
            result = allreduce(self._mine[1], op=Max, name=name, process_set=process_set)
        checks.pending.append((result, size, lr, wd, self._steps, method))


def check_last_steps():
    """Reads the last two steps' checks of every trainer of this process, and those of the
    freed trainers (``hvd.shutdown()`` and the exit call it after this rank's collectives
    have run), and forgets them. Never raises: a job that is stopping with an error says so
    elsewhere."""
    every = [c._checks for c in list(_live)] + [entry[0] for entry in _orphans]
    del _orphans[:]
    for checks in every:
        try:
            checks.read_all()
        except Exception:  # noqa: BLE001 - the collective failed with the job
            checks.pending.clear()  # a later init() must not read this job's results


after_local_work(check_last_steps)  # at shutdown() and exit, once the collectives ran
