"""hvd.broadcast_optimizer_state and resuming from one shared states file (issue 48) on 2
and 3 ranks: parameters on mx.cpu(rank), Adam with a FactorScheduler; resuming with rank 0
loading then broadcasting, or every rank loading rank 0's file, equals one process trained
without a break; states made before any step; a Module; errors on every rank, never a hang.
The worker, tests/training/workers/optimizer_state.py, asserts on every rank."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3], ids=lambda np_: "np%d" % np_)
def test_broadcast_optimizer_state(np_):
    run_ranks(np_, "optimizer_state.py", timeout=150)
