"""hvd.join() (issue 48) on 2 and 3 ranks: uneven steps with Sum, Average, grouped and
in-place allreduces; the collectives that cannot take a joined rank's zeros fail naming it;
DistributedTrainer over uneven shards equals one process on the active ranks' batch. The
worker, tests/training/workers/join.py, asserts on every rank."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3], ids=lambda np_: "np%d" % np_)
def test_join(np_):
    run_ranks(np_, "join.py", timeout=150)


def test_join_stall_names_the_ranks_not_joined():
    """A join that waits past the stall check time is reported, naming the missing rank."""
    out = run_ranks(2, "join_stall.py", timeout=60,
                    env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1"}).stdout
    assert "join 'join' waited" in out and "missing ranks 1" in out, out
