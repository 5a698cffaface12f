"""A warning when the ranks pass different batch sizes to ``DistributedTrainer.step`` (or to
``gluon.Trainer.step`` over kvstore 'horovod' or with a ``DistributedOptimizer``;
``update`` too).

Each rank divides the averaged gradient by the ``batch_size`` it passes (``gluon.Trainer``
sets ``rescale_grad = 1 / batch_size``), so ranks passing different sizes (last batches of
different lengths: a ``DataLoader`` with ``last_batch='keep'`` over shards of different
lengths) apply different updates and their weights drift apart from then on. Horovod says
nothing; here every step submits one allreduce (Max) of ``(b, -b, nan, not nan)``
(float64, 32 bytes; ``b`` is -inf for a NaN size, so that the largest and smallest finite
sizes and whether any rank passed NaN, and any did not, come back; a separate collective
named ``<trainer prefix>batch_size``) and reads it two steps later, when it has long
completed, so the step itself never waits for the peers. (Read at the next step, it was
often still waiting there for the previous backward, and Python could not run ahead; and the
array of ``(b, -b, ...)``, made afresh each step, waited in ``mx.nd.array`` for MXNet's
engine to reach it: now it is made when ``b`` changes only. Together ~0.7 ms of the main
thread's CPU per MNIST step on 2 ranks.) The last two steps' are read at
``hvd.shutdown()`` or at exit, once this rank's collectives have run. A mismatch warns once
per trainer, on every rank, naming the step, this rank's size and the range over the ranks
(NaN on every rank is no mismatch: the weights are NaN alike).
"""
import collections
import math
import warnings
import weakref

import mxnet as mx

from mxhorovod.basics import rank
from mxhorovod.mpi_ops import Max, allreduce

# A step reads the check of the step before the last one: long completed (the last step's
# may still be waiting for backward, and reading it would stop Python from running ahead).
_LAG = 2
_live = weakref.WeakSet()  # the checks of this process, for check_last_steps


class BatchSizeCheck(object):
    """One per trainer: ``submit(batch_size, name, process_set, method)`` at every ``step``
    or ``update`` (``method``, for the warning), on every rank of the set alike.
    ``label``: the trainer's class, for the warning."""

    def __init__(self, label="DistributedTrainer"):
        self._label = label
        self._pending = collections.deque()  # (result NDArray, size, step number, method)
        self._mine = (None, None)  # (its values, the NDArray): reused while they are the same
        self._steps = 0
        self._warned = False
        _live.add(self)

    def submit(self, batch_size, name, process_set, method="step"):
        self._steps += 1
        if len(self._pending) >= _LAG:
            self._check_oldest()
        if self._warned:
            return  # warned once: no more collectives for it
        size = float(batch_size)
        values = (-math.inf, -math.inf, 1.0, 0.0) if math.isnan(size) else (size, -size, 0.0, 1.0)
        if values != self._mine[0]:
            self._mine = (values, mx.nd.array(values, dtype="float64"))
        result = allreduce(self._mine[1], op=Max, name=name, process_set=process_set)
        self._pending.append((result, size, self._steps, method))

    def _check_oldest(self, stacklevel=5):  # 5: the caller of step() or update()
        result, size, step, method = self._pending.popleft()
        if self._warned:
            return
        largest, negated_smallest, any_nan, any_finite = result.asnumpy().tolist()
        smallest = -negated_smallest
        if any_finite and (any_nan or largest != smallest):
            self._warned = True
            over = "from %g to %g" % (smallest, largest) + (", and nan," if any_nan else "")
            warnings.warn(
                "%s.%s(batch_size): at step %d the ranks passed different batch sizes "
                "(this rank, %d, %g; %s over the ranks). Each rank divides "
                "the averaged gradient by its own, so their weights now differ: give every "
                "rank the same number of samples per step (examples/distributed_data.py's "
                "ShardSampler with last_batch='discard')."
                % (self._label, method, step, rank(), size, over),
                UserWarning, stacklevel=stacklevel)


def check_last_steps():
    """Reads the last two steps' checks of every trainer of this process (``hvd.shutdown()``
    and the exit call it after this rank's collectives have run), and forgets them. Never
    raises: a job that is stopping with an error says so elsewhere."""
    for check in list(_live):
        try:
            while check._pending:
                check._check_oldest(stacklevel=2)
        except Exception:  # noqa: BLE001 - the collective failed with the job
            check._pending.clear()  # a later init() must not read this job's results
