"""The settings that decide the MPI calls agree across ranks, or init() fails on every rank
naming the variable (tests/core/workers/settings_agree.py)."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3])
def test_settings_that_decide_the_mpi_calls_must_agree(np_):
    # Fusion threshold, cache capacity, slice and zero-copy sizes, autotune and dynamic
    # process sets differing on rank 0: init() fails on every rank naming the variable;
    # blocking data calls on some ranks only are agreed (right values, no hang); a value one
    # rank cannot read fails init() on every rank, naming that rank and the variable.
    run_ranks(np_, "settings_agree.py", timeout=240)
