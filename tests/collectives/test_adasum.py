"""op=hvd.Adasum (allreduce, allreduce_, grouped_allreduce, grouped_allreduce_) on 2, 3
and 4 ranks against a numpy reference of the same reduction tree
(tests/collectives/workers/adasum_allreduce.py), through the default backends and the
hierarchical one."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_adasum_against_numpy_tree(np_):
    run_ranks(np_, "adasum_allreduce.py", args=[np_], timeout=120)


def test_adasum_hierarchical_and_unfused():
    run_ranks(3, "adasum_allreduce.py", args=[3], timeout=120,
              env={"HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "HOROVOD_FUSION_THRESHOLD": "0"})
