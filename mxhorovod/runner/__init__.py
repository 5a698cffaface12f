"""mxhorovodrun: horovodrun's command line, launching with the installed MPI's mpirun.

    mxhorovodrun -np 4 python train.py
    mxhorovodrun -np 4 -H host1:2,host2:2 --fusion-threshold-mb 32 python train.py
    python -m mxhorovod.runner -np 2 python train.py      (the same, without the script)

Modules: args (flags), hosts (-H / --hostfile), settings (HOROVOD_* and OMP_NUM_THREADS),
mpi (finding mpirun, telling MPICH/hydra, Open MPI and Intel MPI apart, their command
lines), startup (--start-timeout's checks), output (under hydra, each rank's output
relayed line by line by a Python of its own; --output-filename and
--prefix-output-with-timestamp), check_build (--check-build), launch (main).
"""
from mxhorovod.runner.launch import main, run_commandline

__all__ = ["main", "run_commandline"]
