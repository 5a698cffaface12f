"""hvd.init()'s check that an srun step's tasks form one MPI job
(mxhorovod/common/slurm_check.py), from the environments seen on the Slurm cluster of
test_on_slurm.py, without Slurm: which processes are refused and which never are."""
import pytest

from mxhorovod.common.slurm_check import check_world, refusal

# A task of `srun -N2 -n4 --mpi=none`: Slurm's step variables, no PMI.
SRUN_NONE = {"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3",
             "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4"}


def test_a_task_of_a_multi_task_step_alone_in_its_world_is_refused():
    text = refusal(1, SRUN_NONE)
    assert text.startswith("hvd.init(): this process is task 3 of the 4 tasks of Slurm step "
                           "12.0, but its MPI world has 1 process"), text
    assert "srun --mpi=pmi2" in text and "MXHOROVOD_SLURM_SINGLE_TASKS=1" in text
    with pytest.raises(RuntimeError, match="srun --mpi=pmi2"):
        check_world(1, SRUN_NONE)


@pytest.mark.parametrize("world,env", [
    (4, dict(SRUN_NONE, PMI_SIZE="4", PMI_RANK="3")),   # srun --mpi=pmi2: one world
    # python once in a batch script: the batch step has no SLURM_STEP_NUM_TASKS.
    (1, {"SLURM_JOB_ID": "12", "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}),
    (1, dict(SRUN_NONE, SLURM_STEP_NUM_TASKS="1")),      # srun -n1
    # mpirun -np 1 in an allocation: hydra's one proxy; PMI says a world of 1.
    (1, dict(SRUN_NONE, SLURM_STEP_NUM_TASKS="2", PMI_SIZE="1")),
    (1, {}),                                              # outside Slurm
    (1, dict(SRUN_NONE, MXHOROVOD_SLURM_SINGLE_TASKS="1")),   # asked for
    (1, dict(SRUN_NONE, MXHOROVOD_SLURM_SINGLE_TASKS="yes")),
])
def test_never_refused(world, env):
    assert refusal(world, env) is None
    check_world(world, env)


def test_a_bad_setting_is_named():
    with pytest.raises(ValueError, match="MXHOROVOD_SLURM_SINGLE_TASKS=maybe"):
        refusal(1, dict(SRUN_NONE, MXHOROVOD_SLURM_SINGLE_TASKS="maybe"))
    assert refusal(1, dict(SRUN_NONE, MXHOROVOD_SLURM_SINGLE_TASKS="0")) is not None
