"""The mean over the samples the ranks actually processed.

Each step of ``DistributedTrainer``, or of a ``gluon.Trainer`` or Module with a
``DistributedOptimizer``, submits one float64 Sum allreduce of this rank's batch size
(``<prefix>samples``) beside its gradients, which are averaged over the ranks as always.
Before the update, every rank reads the total S and sets the optimizer's ``rescale_grad``
to ``scale * ranks / S`` (``scale``: the Trainer's ``_scale``, 1 for a Module), the same
number on every rank: the update then uses the sum of every sample's gradient over S.
Ranks may pass different batch sizes (a short last batch), and a rank that has called
``hvd.join()`` adds neither gradient nor samples, so a step equals one process on the
samples actually processed, and the ranks' weights stay bit-identical.
The read waits for that one small collective, which completes once every rank has
reached its step; the gradients' reductions are already queued by then.
"""
import math
import numbers

import mxnet as mx
import numpy as np

from mxhorovod.collectives.ops import Sum, allreduce

__all__ = ["submit", "rescale"]


class Pending(object):
    """A submitted batch size: the allreduce's result and this rank's value."""
    __slots__ = ("result", "mine", "what")

    def __init__(self, result, mine, what):
        self.result, self.mine, self.what = result, mine, what


def _value(batch_size):
    """The batch size as a float, or NaN when it is not a number >= 0 (every rank then
    raises, at the read: a rank alone raising would leave its peers waiting)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Real):
        return math.nan
    v = float(batch_size)
    return v if 0 <= v < math.inf else math.nan


def submit(batch_size, name, process_set, what):
    """Submits this rank's ``batch_size`` under ``name`` over ``process_set`` (every rank
    of the set, each step); ``what``: the call, for the error. Never waits."""
    v = _value(batch_size)
    result = allreduce(mx.nd.from_numpy(np.array([v], dtype=np.float64), zero_copy=True),
                       op=Sum, name=name, process_set=process_set)
    return Pending(result, batch_size, what)


def rescale(pending, scale, ranks):
    """``scale * ranks / S``, S the ranks' total; waits for it.

    Raises:
        TypeError: on a rank that passed a batch size that is not a number (None, a
            string), as ``gluon.Trainer.step`` does; ValueError on the other ranks.
        ValueError: on every rank, when some rank passed a number < 0, or every rank
            passed 0.
    """
    total = float(pending.result.asnumpy()[0])
    mine = pending.mine
    if isinstance(mine, bool) or not isinstance(mine, numbers.Real):
        raise TypeError(
            "%s: batch_size must be this rank's number of samples in the step, got %r; "
            "the other ranks raise ValueError" % (pending.what, mine))
    if not (0 < total < math.inf):
        raise ValueError(
            "%s: the ranks' batch sizes add up to %g (this rank passed %r): pass each rank's "
            "number of samples in the step, a number >= 0, and not 0 on every rank"
            % (pending.what, total, pending.mine))
    return scale * ranks / total
