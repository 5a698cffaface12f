"""hvd.join() (issue 48) on 2 and 3 ranks: uneven steps with Sum, Average, grouped and
in-place allreduces; the collectives that cannot take a joined rank's zeros fail naming it;
DistributedTrainer over uneven shards equals one process on the active ranks' batch. The
worker, tests/training/workers/join.py, asserts on every rank."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3], ids=lambda np_: "np%d" % np_)
def test_join(np_):
    run_ranks(np_, "join.py", timeout=150)
