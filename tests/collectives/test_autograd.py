"""Collectives inside autograd.record() are differentiated: the inputs' gradients of the sum
of every rank's loss (tests/collectives/workers/autograd_collectives.py)."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_,engine,mode", [(2, None, ""), (3, None, ""), (2, "NaiveEngine", ""),
                                             (3, None, "np")])
def test_collectives_inside_autograd_record_are_differentiated(np_, engine, mode):
    # allreduce (Sum/Average, scale factors), allgather (uneven), broadcast, reducescatter,
    # alltoall: the inputs' gradients of the sum of every rank's loss (they were zero), and a
    # mean over all ranks inside the loss trains as one process on the concatenated batch.
    env = {"MXNET_ENGINE_TYPE": engine} if engine else None
    run_ranks(np_, "autograd_collectives.py", [mode] if mode else [], timeout=180, env=env)
