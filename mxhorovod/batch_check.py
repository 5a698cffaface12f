"""A warning when the ranks pass different batch sizes to ``DistributedTrainer.step`` (or to
``gluon.Trainer.step`` over kvstore 'horovod' or with a ``DistributedOptimizer``;
``update`` too).

Each rank divides the averaged gradient by the ``batch_size`` it passes (``gluon.Trainer``
sets ``rescale_grad = 1 / batch_size``), so ranks passing different sizes (last batches of
different lengths: a ``DataLoader`` with ``last_batch='keep'`` over shards of different
lengths) apply different updates and their weights drift apart from then on. Horovod says
nothing; here every step submits one allreduce (Max) of ``(batch_size, -batch_size)``
(float64, 16 bytes; a separate collective named ``<trainer prefix>batch_size``) and reads
it at the trainer's next step, when it has long completed, so the step itself never waits
for the peers. A mismatch warns once per trainer, on every rank, naming the step, this
rank's size and the range over the ranks. The last step of a run is not checked.
"""
import warnings

import mxnet as mx

from mxhorovod.basics import rank
from mxhorovod.mpi_ops import Max, allreduce


class BatchSizeCheck(object):
    """One per trainer: ``submit(batch_size, name, process_set, method)`` at every ``step``
    or ``update`` (``method``, for the warning), on every rank of the set alike.
    ``label``: the trainer's class, for the warning."""

    def __init__(self, label="DistributedTrainer"):
        self._label = label
        self._pending = None  # (result NDArray, this rank's size, step number, method)
        self._steps = 0
        self._warned = False

    def submit(self, batch_size, name, process_set, method="step"):
        self._steps += 1
        self._check_previous()
        if self._warned:
            return  # warned once: no more collectives for it
        size = float(batch_size)
        mine = mx.nd.array([size, -size], dtype="float64")
        result = allreduce(mine, op=Max, name=name, process_set=process_set)
        self._pending = (result, size, self._steps, method)

    def _check_previous(self):
        if self._pending is None:
            return
        result, size, step, method = self._pending
        self._pending = None
        largest, negated_smallest = result.asnumpy().tolist()
        smallest = -negated_smallest
        if largest != smallest:
            self._warned = True
            warnings.warn(
                "%s.%s(batch_size): at step %d the ranks passed different batch sizes "
                "(this rank, %d, %g; from %g to %g over the ranks). Each rank divides "
                "the averaged gradient by its own, so their weights now differ: give every "
                "rank the same number of samples per step (examples/distributed_data.py's "
                "ShardSampler with last_batch='discard')."
                % (self._label, method, step, rank(), size, smallest, largest),
                UserWarning, stacklevel=5)  # the caller of step() or update()
