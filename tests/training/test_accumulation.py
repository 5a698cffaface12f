"""Gradient accumulation, DistributedTrainer(backward_passes_per_step=k) (issue 49), on 2 and
3 ranks: equal to one process stepping on the whole batch (SGD with momentum, Adam, bucket
views, fp16 compression, allreduce_grads -> clip -> update); too few passes are refused.
The worker, tests/training/workers/accumulation.py, asserts on every rank."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3], ids=lambda np_: "np%d" % np_)
def test_backward_passes_per_step(np_):
    run_ranks(np_, "accumulation.py", timeout=150)
