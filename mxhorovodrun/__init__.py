"""mxhorovodrun: horovodrun's command line, launching with the installed MPI's mpirun.

    mxhorovodrun -np 4 python train.py
    mxhorovodrun -np 4 -H host1:2,host2:2 --fusion-threshold-mb 32 python train.py
    python -m mxhorovodrun -np 2 python train.py      (the same, without the script)

A package beside mxhorovod, as horovod.runner is beside horovod.mxnet: the launcher imports
the standard library only, never MXNet (--check-build imports mxhorovod, when asked).
Importing this package imports none of its modules: a rank imports elastic_protocol and
cores alone. ``mxhorovod.runner`` names the same modules, at the cost of importing MXNet.
Modules: launch (main), args, hosts, settings, mpi, command, startup, output, guard,
check_build, cores, horovod_alias, elastic_driver, elastic_protocol.
"""
__all__ = ["main", "run_commandline"]


def main(argv=None, **kwargs):
    """:func:`mxhorovodrun.launch.main`. Imported when called: a rank imports this package
    for its protocol modules (elastic_protocol, cores) and never needs the launcher."""
    from mxhorovodrun import launch
    return launch.main(argv, **kwargs)


def run_commandline():
    """:func:`mxhorovodrun.launch.run_commandline`, the ``mxhorovodrun`` console script."""
    from mxhorovodrun import launch
    return launch.run_commandline()
