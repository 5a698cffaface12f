"""DistributedTrainer with contiguous gradient buckets on several ranks: each worker
compares every rank's parameters with the run without bucket views and with one process
trained on the concatenated batch (see training/workers/buckets_training.py)."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3])
def test_bucket_views_train_like_one_process(np_):
    # SGD, Adam hybridized with static_alloc; allreduce_grads then update; grad_req='add';
    # deferred init; float32+float64 with grad_req='null' parameters; re-bucketing when
    # grad_req changes; fp16 compression; num_groups with predivide; save/load of the
    # trainer states; ranks whose layouts differ get a ValueError, not a hang; gradient
    # arrays made while autograd records (a non-hybridized net finishing deferred init layer
    # by layer, a parameter used around a deferred layer, a shape set in forward, static
    # cached children of a Sequential, blocks initialized one by one) or replaced around it
    # (force_reinit inside record(), reset_ctx, cast), against the run without views.
    run_ranks(np_, "buckets_training.py", timeout=300)
