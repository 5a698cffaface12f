"""Errors on several ranks: a call refused, failed or mismatched on some ranks fails on every
rank naming the cause, and the job goes on (tests/core/workers/errors_*.py; each worker
asserts on its own rank and prints RANK <r> OK)."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_errors_late_rank_and_restart(np_):
    run_ranks(np_, "errors_late_rank.py", timeout=240)


@pytest.mark.parametrize("np_", [2, 3])
def test_naive_engine_errors_raise_at_the_call(np_):
    run_ranks(np_, "errors_naive_engine.py", timeout=180, env={"MXNET_ENGINE_TYPE": "NaiveEngine"})


@pytest.mark.parametrize("np_", [2, 3])
def test_collective_skipped_after_a_failed_input_fails_everywhere(np_):
    run_ranks(np_, "errors_skipped_input.py", timeout=180)


@pytest.mark.parametrize("np_,engine", [(2, None), (3, None), (2, "NaiveEngine")])
def test_call_refused_on_one_rank_fails_the_peers_call(np_, engine):
    env = {"MXNET_ENGINE_TYPE": engine} if engine else None
    run_ranks(np_, "errors_refused_on_one_rank.py", timeout=180, env=env)


@pytest.mark.parametrize("np_,env", [
    (2, {}), (3, {}), (2, {"MXNET_ENGINE_TYPE": "NaiveEngine"}), (3, {"HOROVOD_CACHE_CAPACITY": "0"}),
])
def test_grouped_call_of_different_lengths_fails_on_every_rank(np_, env):
    # grouped_allreduce / grouped_reducescatter with a list one rank shorter: every rank
    # raises 'Mismatched numbers of tensors' (the shorter rank used to go on, the others to
    # wait forever), and the same names work again afterwards. An empty list on one rank
    # (grouped_allgather too): that rank gets [] at once, the peers the error (they used to
    # wait forever); empty on every rank: [] everywhere; unnamed calls stay in step.
    run_ranks(np_, "errors_group_size_mismatch.py", timeout=180, env=env)
