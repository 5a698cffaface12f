"""Sharding a dataset over ranks so that every rank runs the same number of steps.

A rank that runs one step more than its peers waits forever in that step's allreduce, so
the training shards are cut to equal length (the last ``len % size`` samples of each
reshuffled epoch are left out); evaluation shards cover every sample exactly once.
"""
import numpy as np

__all__ = ["ShardSampler", "eval_shard"]


class ShardSampler(object):
    """Sampler (for ``gluon.data.DataLoader(sampler=...)``) over this rank's equal share.

    Args:
        length: number of samples in the dataset.
        num_parts: number of ranks.
        part_index: this rank.
        shuffle: reshuffle every epoch; the permutation depends only on ``seed`` and the
            epoch given to :meth:`set_epoch`, so it is the same on every rank and after a
            resume.
        seed: base of the shuffling seed.

    Every rank yields ``length // num_parts`` indices; together they are disjoint.
    """

    def __init__(self, length, num_parts=1, part_index=0, shuffle=True, seed=0):
        if not 0 <= part_index < num_parts:
            raise ValueError("part_index %d not in [0, %d)" % (part_index, num_parts))
        if length < num_parts:
            raise ValueError("%d samples cannot be shared by %d ranks" % (length, num_parts))
        self._length, self._parts, self._index = length, num_parts, part_index
        self._shuffle, self._seed, self._epoch = shuffle, seed, 0

    def set_epoch(self, epoch):
        """Select the permutation of ``epoch`` (call before iterating each epoch)."""
        self._epoch = epoch

    def __len__(self):
        return self._length // self._parts

    def __iter__(self):
        if self._shuffle:
            order = np.random.RandomState(self._seed + self._epoch).permutation(self._length)
        else:
            order = np.arange(self._length)
        n = len(self)
        return iter(order[self._index * n:(self._index + 1) * n].tolist())


def eval_shard(length, num_parts, part_index):
    """Indices of this rank's evaluation share: ``part_index::num_parts`` (sizes may differ
    by one; together they cover every sample once)."""
    return np.arange(part_index, length, num_parts)
