"""The check at ``hvd.init()`` that a Slurm job step's tasks form one MPI job.

``srun -n4 python train.py`` starts 4 tasks; they form one MPI world only when srun gives
them a process-management interface that MPI speaks. The ``mpich`` wheel's MPICH speaks
PMI-1, which Slurm's ``--mpi=pmi2`` plugin accepts. Under ``--mpi=none`` (a common site
default) each task starts MPI alone, as a job of size 1, and trains by itself with no
word. :func:`check_world` turns that into an error; MXHOROVOD_SLURM_SINGLE_TASKS=1 lets
deliberate one-process tasks (a sweep of independent runs) through. Runs once per init,
never in a collective's path.

Which tasks are checked: those of a job step with several tasks (SLURM_STEP_NUM_TASKS > 1,
set by srun). A batch script's own step (``python train.py`` run once in an sbatch script)
has no SLURM_STEP_NUM_TASKS; ranks started by mpirun/mxhorovodrun inside an allocation
carry the step of hydra's proxies, whose world is the whole job (PMI_SIZE), never 1 when
the step has several tasks.
"""
import os

__all__ = ["SINGLE_TASKS_VARIABLE", "check_world", "refusal"]

SINGLE_TASKS_VARIABLE = "MXHOROVOD_SLURM_SINGLE_TASKS"


def refusal(world_size, environ):
    """The error text for a task of a multi-task Slurm step whose MPI world has
    ``world_size`` (1) process, or None when nothing is wrong (or the setting allows it).

    Raises:
        ValueError: MXHOROVOD_SLURM_SINGLE_TASKS is neither on nor off (named in the
            message).
    """
    if world_size != 1:
        return None
    tasks = environ.get("SLURM_STEP_NUM_TASKS", "").strip()
    if not tasks.isdigit() or int(tasks) < 2:
        return None
    if environ.get("PMI_SIZE", "").strip() == "1":  # the launcher itself says: a world of 1
        return None
    # Only here, where a task is about to be refused: a rank imports none of the
    # launcher's modules but the few it shares (tests/install/test_package_layout.py).
    from mxhorovodrun.settings import env_switch
    if env_switch(environ, SINGLE_TASKS_VARIABLE, False,
                  "1 (each task of an srun step may run alone) or 0 (refused, the default)"):
        return None
    step = "%s.%s" % (environ.get("SLURM_JOB_ID", "?"), environ.get("SLURM_STEP_ID", "?"))
    return ("hvd.init(): this process is task %s of the %s tasks of Slurm step %s, but its "
            "MPI world has 1 process: srun started the tasks without a PMI that this MPI "
            "speaks (srun --mpi=none, or a site default of none), so every task would train "
            "alone. Launch with srun --mpi=pmi2 (the mpich wheel speaks PMI-1, which Slurm's "
            "pmi2 plugin accepts; not --mpi=pmix), or run mxhorovodrun once inside the "
            "allocation. To run the tasks as independent one-process jobs on purpose, set "
            "%s=1."
            % (environ.get("SLURM_PROCID", "?"), tasks, step, SINGLE_TASKS_VARIABLE))


def check_world(world_size, environ=None):
    """Raises when this process is one task of a multi-task srun step but MPI started it
    as a world of ``world_size`` == 1 (see the module); returns None otherwise.

    Raises:
        RuntimeError: the tasks do not form one job; the message names ``srun --mpi=pmi2``
            and MXHOROVOD_SLURM_SINGLE_TASKS.
        ValueError: MXHOROVOD_SLURM_SINGLE_TASKS is neither on nor off.
    """
    text = refusal(world_size, os.environ if environ is None else environ)
    if text:
        raise RuntimeError(text)
