"""DistributedSampler: this rank's share of a dataset, every sample once per epoch."""
import mxnet as mx
import numpy as np

from mxhorovod.common.basics import rank, size

__all__ = ["DistributedSampler"]


class DistributedSampler(mx.gluon.data.Sampler):
    """Sampler (``gluon.data.DataLoader(dataset, batch_size=B, sampler=...)``) over this
    rank's share of a dataset, without padding duplicates.

    Rank ``r`` of ``n`` takes positions ``r, r + n, r + 2n, ...`` of the epoch's order:
    the shares are disjoint, cover every sample exactly once, and their lengths differ by
    at most one. A rank with fewer samples runs out of batches first: end each epoch with
    ``hvd.join()`` (and ``last_batch="keep"`` in the loader), and ``DistributedTrainer.step``
    averages over the samples the ranks actually processed. With ``drop_last=True`` every
    rank gets ``len(dataset) // n`` samples instead (the last ``len % n`` of the order are
    left out of that epoch), for loops without ``join()``.

    Args:
        dataset: anything with ``len()``, or the number of samples (an int).
        shuffle: a new order every epoch, the same on every rank: ``numpy``'s permutation
            seeded by ``seed + epoch`` (call :meth:`set_epoch` before each epoch).
        seed: base of the shuffling seed; the same on every rank.
        drop_last: equal shares, cut as above.
        num_replicas: the number of shares (default ``hvd.size()``).
        rank: this rank's share (default ``hvd.rank()``).

    Raises:
        ValueError: ``num_replicas`` < 1, ``rank`` is not in ``[0, num_replicas)``, or
            ``drop_last=True`` leaves a rank no sample.
    """

    def __init__(self, dataset, shuffle=True, seed=0, drop_last=False, num_replicas=None,
                 rank=None):
        self._length = int(dataset) if isinstance(dataset, (int, np.integer)) else len(dataset)
        self._parts = size() if num_replicas is None else int(num_replicas)
        self._index = _rank() if rank is None else int(rank)
        if self._parts < 1:
            raise ValueError("DistributedSampler: num_replicas must be >= 1, got %d"
                             % self._parts)
        if not 0 <= self._index < self._parts:
            raise ValueError("DistributedSampler: rank %d is not in [0, %d)"
                             % (self._index, self._parts))
        if drop_last and self._length < self._parts:
            raise ValueError("DistributedSampler(drop_last=True): %d samples leave some of "
                             "the %d ranks none" % (self._length, self._parts))
        self._shuffle, self._seed, self._drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.epoch = 0

    def set_epoch(self, epoch):
        """Select the order of ``epoch`` (call before iterating each epoch)."""
        self.epoch = int(epoch)

    def __len__(self):
        if self._drop_last:
            return self._length // self._parts
        return len(range(self._index, self._length, self._parts))

    def __iter__(self):
        if self._shuffle:
            order = np.random.RandomState(self._seed + self.epoch).permutation(self._length)
        else:
            order = np.arange(self._length)
        if self._drop_last:
            order = order[:self._length - self._length % self._parts]
        return iter(order[self._index::self._parts].tolist())


_rank = rank
