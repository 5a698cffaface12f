"""Process sets on several ranks: collectives on sets, automatic names on removed and re-given
sets, sets from mpi4py communicators, scaled sums agreed within sets
(tests/collectives/workers/process_sets_*.py)."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_process_sets_reducescatter_grouped_allgather(np_):
    run_ranks(np_, "process_sets_collectives.py", timeout=240,
              env={"HOROVOD_DYNAMIC_PROCESS_SETS": "1"})


def test_unnamed_calls_on_sets_removed_and_on_ids_given_again_after_reinit():
    # The stall shutdown turns a mismatch of automatic names into an error, not a hang.
    run_ranks(3, "process_sets_names.py", timeout=180,
              env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "3",
                   "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "6"})


def test_process_sets_from_mpi4py_communicators():
    # Horovod's Split pattern (MPI.COMM_NULL outside the set), at init and added later, and
    # a set's ranks counted in the job given to init(comm=...).
    run_ranks(4, "process_sets_mpi4py_comms.py", timeout=240)


@pytest.mark.parametrize("blocking,cma", [("1", "1"), ("0", "1"), ("1", "0")])
def test_scaled_sum_agreed_in_process_sets(blocking, cma):
    # MPICH's ring algorithms split the reduction between the ranks, so any disagreement
    # on the op (scaled inside the reduction or not) shows as wrong numbers.
    run_ranks(3, "process_sets_scaled_sum.py", timeout=240,
              env={"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring",
                   "MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM": "tsp_ring",
                   "MXHOROVOD_BLOCKING_DATA": blocking, "MXHOROVOD_CMA": cma})
