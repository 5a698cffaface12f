"""mxhorovodrun: horovodrun's command line, launching with the installed MPI's mpirun.

    mxhorovodrun -np 4 python train.py
    mxhorovodrun -np 4 -H host1:2,host2:2 --fusion-threshold-mb 32 python train.py
    python -m mxhorovodrun -np 2 python train.py      (the same, without the script)

A package of its own, beside mxhorovod rather than inside it, as horovod.runner is beside
horovod.mxnet: importing mxhorovod imports MXNet and the extension (and must: it registers
kvstore 'horovod' and wraps gluon.Trainer), about 1.5 s and 220 MB that the launcher never
needs. The launcher imports the standard library only; --check-build alone imports
mxhorovod, when asked. ``mxhorovod.runner`` (and ``python -m mxhorovod.runner``) still
names these modules, at the cost of that import.

Modules: args (flags), hosts (-H / --hostfile), settings (HOROVOD_* and OMP_NUM_THREADS),
mpi (finding mpirun, telling MPICH/hydra, Open MPI and Intel MPI apart, their command
lines), startup (--start-timeout's checks), output (under hydra, each rank's output
relayed line by line by a Python of its own; --output-filename and
--prefix-output-with-timestamp), guard (each rank under mxhorovod/rank_guard.py, or
--no-rank-guard), check_build (--check-build), launch (main).
"""
from mxhorovodrun.launch import main, run_commandline

__all__ = ["main", "run_commandline"]
