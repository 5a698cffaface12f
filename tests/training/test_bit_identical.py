"""Ranks stay bit-identical (issue 48 item 5): NAG after evaluation passes gives the same
bits on every rank with DistributedTrainer, a DistributedOptimizer and kvstore 'horovod'
(weights settled into the plain layout before the update); with the settling switched off
the same scenario drifts on every path, every run (the test would catch a regression).
The worker, tests/training/workers/bit_identical.py, asserts on every rank."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("mode", ["settled", "unsettled"])
def test_nag_after_evaluation(mode):
    run_ranks(2, "bit_identical.py", args=[mode], timeout=120)
