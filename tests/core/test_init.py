"""init() on several ranks: refused init then a normal exit, init and shutdown from several
threads, init in a spawned child, init on sub-communicators beside mpi4py
(tests/core/workers/init_*.py)."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


def test_refused_init_then_a_normal_exit():
    # init() refused after MPI started, rank 0 ending first: exit status 0, every rank done.
    run_ranks(3, "init_refused_exit.py", timeout=120)


def test_init_and_shutdown_from_several_threads_at_once():
    # Four threads call init() together, then three shutdown(): all return (they waited
    # forever), the job works.
    run_ranks(2, "init_threads.py", timeout=120)


@pytest.mark.parametrize("when", ["before", "after"])
def test_init_in_a_spawned_child_raises_naming_pmi_fd(when):
    # A multiprocessing 'spawn' child of a rank calling hvd.init(): a clear ValueError, and
    # a file at PMI_FD's number untouched (it was MPICH's abort of the child); the job runs.
    run_ranks(2, "init_in_spawned_child.py", [when], timeout=240)


def test_init_on_subcommunicators_beside_mpi4py():
    # The stall shutdown turns a mismatch of automatic names into an error, not a hang.
    run_ranks(4, "init_subcommunicators.py", timeout=180,
              env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "3",
                   "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "6"})
