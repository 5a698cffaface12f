"""DistributedTrainer(op=hvd.Adasum) and DistributedOptimizer(op=hvd.Adasum) (issue 49) on 2
and 3 ranks: identical data equals one process; different data gives identical weights
moved by the Adasum of the local steps; bad arguments refused. The worker,
tests/training/workers/adasum_training.py, asserts on every rank."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3], ids=lambda np_: "np%d" % np_)
def test_adasum_training(np_):
    run_ranks(np_, "adasum_training.py", timeout=150)
