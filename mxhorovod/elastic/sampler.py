"""ElasticSampler: Horovod's elastic torch sampler for Gluon's DataLoader."""
import math
import random

import mxnet as mx

from mxhorovod.common.basics import rank, size

__all__ = ["ElasticSampler"]


class ElasticSampler(mx.gluon.data.Sampler):
    """Shards a dataset over the current ranks and, after a reset, shares out what is left
    of the epoch among the new ranks: no sample of an epoch is repeated or skipped across a
    reset (Horovod's ``horovod.torch.elastic.ElasticSampler``, same semantics).

    Use: ``DataLoader(dataset, batch_size=B, sampler=sampler)``; keep the sampler in the
    state (``GluonState(net, trainer, sampler=sampler, ...)``); after each batch call
    ``sampler.record_batch(batch_idx, B)``; call ``sampler.set_epoch(epoch)`` when an epoch
    ends (not when it starts). A commit saves ``epoch`` and ``processed_num``.

    Args:
        dataset: anything with ``len()`` (its size must not change).
        shuffle: shuffle the indices of each epoch (the same on every rank: seeded by
            ``seed + epoch``).
        seed: same on every rank.

    Each rank gets ``ceil(remaining / size)`` indices (the list is padded with its own
    first indices to a multiple of ``size``, as in Horovod), rank r taking every size-th from
    r. ``record_batch`` counts ``batch_size * size`` samples as processed.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts ``epoch``: clears the count of processed samples."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of ``batch_size`` samples on every rank as processed."""
        self.processed_num += batch_size * self.num_replicas

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def reset(self):
        """Shards what is left of the epoch over the current ranks (``hvd.size()``)."""
        self.num_replicas = size()
        self.rank = rank()
        all_indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(all_indices)
        self.remaining_indices = all_indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) * 1.0 / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        indices += indices[:(self.total_size - len(indices))]
        assert len(indices) == self.total_size
        indices = indices[self.rank:self.total_size:self.num_replicas]
        assert len(indices) == self.num_samples
        return iter(indices)

    def __len__(self):
        return self.num_samples
