"""Gradient accumulation, backward_passes_per_step=k (issue 49), on 2 and 3 ranks: equal to
one process stepping on the whole batch; too few passes are refused. The workers assert on
every rank: tests/training/workers/accumulation.py (DistributedTrainer: SGD with momentum,
Adam, bucket views, fp16 compression, allreduce_grads -> clip -> update) and
accumulation_optimizer.py (DistributedOptimizer in a gluon.Trainer and in a Module)."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3], ids=lambda np_: "np%d" % np_)
def test_backward_passes_per_step(np_):
    run_ranks(np_, "accumulation.py", timeout=150)


@pytest.mark.parametrize("np_", [2, 3], ids=lambda np_: "np%d" % np_)
def test_distributed_optimizer_backward_passes_per_step(np_):
    run_ranks(np_, "accumulation_optimizer.py", timeout=150)
