"""The periodic cross-rank check of the trainable parameters (issue 48 item 5): silent in
normal training (BatchNorm's running statistics differ by rank and are not compared); one
weight moved by one ulp on one rank is named, with the ranks holding each value, on every
rank, for DistributedTrainer, a DistributedOptimizer, kvstore 'horovod' and a process set.
The worker, tests/training/workers/parameter_check.py, asserts on every rank."""
import pytest

from mxhorovod.checks.parameter_check import DEFAULT_STEPS, check_steps
from mxhorovod_devtools.mpirun import run_ranks


def test_parameter_check_on_three_ranks():
    run_ranks(3, "parameter_check.py", timeout=120,
              env={"MXHOROVOD_PARAMETER_CHECK_STEPS": "2"})


def test_check_steps_setting():
    assert check_steps({}) == DEFAULT_STEPS == 100
    assert check_steps({"MXHOROVOD_PARAMETER_CHECK_STEPS": " 7 "}) == 7
    assert check_steps({"MXHOROVOD_PARAMETER_CHECK_STEPS": "0"}) == 0  # off
    for bad in ("-1", "ten", "1.5"):
        with pytest.raises(ValueError, match="MXHOROVOD_PARAMETER_CHECK_STEPS='%s'" % bad):
            check_steps({"MXHOROVOD_PARAMETER_CHECK_STEPS": bad})
