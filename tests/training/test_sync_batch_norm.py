"""hvd.SyncBatchNorm (issue 47) on 2 and 3 ranks: equal to one process running
gluon.nn.BatchNorm on the concatenated batch (outputs, input gradients, gamma and beta
gradients summed over the ranks, running statistics, parameters after DistributedTrainer's
updates; 3 steps), per-rank batches of different sizes, float32 and float16, not
hybridized, hybridized, and hybridized with static_alloc and static_shape; two layers in
flight together and one layer used twice in a graph; GluonCV's norm_layer; predict mode and
use_global_stats on rank 0 alone (no collective); a layer over a process set; channel
counts, dtypes differing between ranks and a rank outside the set (an error, never a hang).
The worker, tests/training/workers/sync_batch_norm_checks.py, asserts on every rank.
sync_batch_norm_order.py: a layer reaches its collective while a reduction waiting for a
peer holds the custom operators' temporary space, and two threads train at once."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks

TRAINING_RUNS = ["float32-none", "float32-plain", "float32-static", "float16-none",
                 "float16-plain", "float16-static"]


@pytest.mark.parametrize("np_", [2, 3], ids=lambda np_: "np%d" % np_)
def test_sync_batch_norm(np_):
    # GluonCV's ResNet once (the 2-rank job): the slowest check, and the same on 3 ranks.
    runs = TRAINING_RUNS + (["gluoncv"] if np_ == 2 else [])
    run_ranks(np_, "sync_batch_norm_checks.py", args=runs, timeout=120)


def test_sync_batch_norm_forwards_in_opposite_orders():
    # One temporary space: an MXNet reduction waiting for one layer's collective holds it.
    run_ranks(2, "sync_batch_norm_order.py", env={"MXNET_CPU_TEMP_COPY": "1"}, timeout=120)
