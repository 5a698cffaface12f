"""Adasum in the trainers: each rank's optimizer step is reduced, not its gradient.

As Horovod's PyTorch Adasum optimizer (``horovod/torch/optimizer.py``): every rank runs
its local optimizer step on its own gradient, and the change it made to each weight (the
delta) is combined over the ranks with Adasum (Maleki et al., "Scaling Distributed
Training with Adaptive Summation", MLSys 2021). Every rank then applies the combined
delta to the weights it had before the step, so the weights stay identical; the local
optimizer states (momentum, Adam's moments) stay each rank's own.

All of it is engine work: nothing here waits for the peers.
"""
import mxnet as mx

from mxhorovod.collectives.ops import Adasum, allreduce_

__all__ = ["AdasumDeltas"]


class AdasumDeltas(object):
    """The weights before a local step and the deltas' buffers, per key (reused while a
    weight keeps its shape, dtype and context). ``before(pairs)`` ahead of the local
    update, ``after(pairs, name_of, process_set)`` after it; ``pairs``: ``[(key, weight
    NDArray)]``, the same keys in the same order on every rank of the set."""

    def __init__(self):
        self._start = {}  # key -> (weight before the step, delta buffer)

    def _buffers(self, key, weight):
        got = self._start.get(key)
        if got is None or got[0].shape != weight.shape or got[0].dtype != weight.dtype or \
                got[0].context != weight.context:
            got = self._start[key] = (mx.nd.zeros(weight.shape, weight.context, weight.dtype),
                                      mx.nd.zeros(weight.shape, weight.context, weight.dtype))
        return got

    def before(self, pairs):
        for key, weight in pairs:
            weight.copyto(self._buffers(key, weight)[0])

    def after(self, pairs, name_of, process_set, priority_of=lambda key: 0):
        for key, weight in pairs:
            start, delta = self._buffers(key, weight)
            mx.nd.elemwise_sub(weight, start, out=delta)
            allreduce_(delta, op=Adasum, name=name_of(key), priority=priority_of(key),
                       process_set=process_set)
            mx.nd.elemwise_add(start, delta, out=weight)

    def drop(self):
        """Forget the buffers (their memory: two arrays per weight)."""
        self._start.clear()
