"""Training layer on several ranks: each worker compares every rank's parameters with one
process trained on the concatenated batch (see tests/training/workers/training_*.py)."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_equivalence_with_one_process(np_):
    # SGD+momentum, Adam, NAG, LAMB; DistributedTrainer, DistributedOptimizer in gluon.Trainer,
    # Module fit and manual loop; grouped allreduce and gradient_predivide_factor.
    run_ranks(np_, "training_equivalence.py", timeout=300)


@pytest.mark.parametrize("np_", [2, 3])
def test_broadcast_helpers(np_):
    # Deferred init, inference-mode MKLDNN weights, Module dicts, broadcast/allgather_object,
    # different keys on some ranks (an error on every rank).
    run_ranks(np_, "training_broadcast.py", timeout=240)


@pytest.mark.parametrize("np_,engine", [(2, None), (3, None), (2, "NaiveEngine"),
                                         (3, "NaiveEngine")])
def test_broadcast_parameters_deferred_on_some_ranks(np_, engine):
    # Rank 0 loaded a checkpoint, the others defer (plain, hybridized, then a few
    # DistributedTrainer steps); the root deferred; different layers deferred per rank; two
    # calls before the forward. NaiveEngine used to hang: the ranks broadcast in different
    # orders (rank 0 at the call, the others in the forward).
    env = {"MXNET_ENGINE_TYPE": engine} if engine else None
    run_ranks(np_, "training_broadcast_deferred.py", timeout=240, env=env)


@pytest.mark.parametrize("np_", [2, 3])
def test_trainer_in_a_process_set(np_):
    # Ranks 0 and 1 train together (plain and bucket views); others alone, never waited for.
    run_ranks(np_, "training_process_set.py", timeout=240)


@pytest.mark.parametrize("np_", [2, 3])
def test_optimizer_states_loaded_after_a_new_init_keep_their_process_set(np_):
    # gluon.Trainer.save_states pickles the DistributedOptimizer with its process set; loaded
    # after an init() that registered the sets in another order, it reduces over the set
    # with the same ranks (before: over whichever set had the old id). Pickled sets load as
    # the registered set of their ranks, or unregistered.
    run_ranks(np_, "training_states_process_set.py", timeout=180)


@pytest.mark.parametrize("np_", [2, 3])
def test_load_states_keeps_the_trainers_reduction(np_):
    # Trainer.load_states put the file's pickled optimizer in place of the Trainer's: plain
    # states (single process, DistributedTrainer) dropped a DistributedOptimizer (ranks
    # drifted apart silently), a DistributedOptimizer's came back into a DistributedTrainer
    # (reduced twice) and into a plain Trainer (reduced where none was asked).
    run_ranks(np_, "training_load_states.py", timeout=180)


@pytest.mark.parametrize("np_", [2, 3])
def test_auto_names_match_when_ranks_made_different_helpers(np_):
    # A set's trainer/optimizer/helpers on its members, unused extras on rank 0: the global
    # ones' automatic names still match on every rank (no hang), results exact.
    run_ranks(np_, "training_uneven_helpers.py", timeout=240)


@pytest.mark.parametrize("np_", [2, 3])
def test_different_batch_sizes_are_warned_two_steps_later(np_):
    # step(b) / update(b) with b differing on one rank: one UserWarning per trainer two
    # steps later, on every rank of the trainer's set, naming the step and the sizes; none for
    # equal sizes (Horovod says nothing while the ranks' weights drift apart).
    run_ranks(np_, "training_batch_size.py", timeout=240)
