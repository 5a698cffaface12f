"""mxhorovodrun's main: parse horovodrun's flags, find and identify mpirun, build the
ranks' environment, then replace this process with mpirun (its exit status is ours)."""
import logging
import os
import shlex
import sys

from mxhorovod.runner.args import parse_args
from mxhorovod.runner.hosts import assign_ranks, parse_hostfile, parse_hosts
from mxhorovod.runner.mpi import LaunchError, detect, find_mpirun, mpirun_command
from mxhorovod.runner.settings import UNUSED_FLAGS, horovod_env, omp_threads, usable_cores

__all__ = ["prepare", "main", "run_commandline"]

log = logging.getLogger("mxhorovodrun")


def prepare(args, environ=None, python=None, cores=None):
    """What to run for the parsed ``args``: (mpi, argv, env, notes).

    ``env`` is ``environ`` (default os.environ) plus the HOROVOD_* variables of the flags,
    the -x variables, OMP_NUM_THREADS = ``cores`` (default: this process's usable cores) //
    the most ranks any host runs, when not already set, and what the MPI needs (hydra's
    ssh arguments). ``notes`` are warnings for the user.

    Raises:
        LaunchError: no usable mpirun (see :func:`mxhorovod.runner.mpi.find_mpirun`).
        ValueError: bad hosts or host file, or more processes than slots.
    """
    env = dict(os.environ if environ is None else environ)
    hosts = parse_hosts(args.hosts) if args.hosts else \
        parse_hostfile(args.hostfile) if args.hostfile else None
    per_host = max(n for _, n in assign_ranks(hosts, args.num_proc)) if hosts else args.num_proc
    env.update(horovod_env(args))
    for item in args.env:
        name, eq, value = item.partition("=")
        if eq:
            env[name] = value
    if not env.get("OMP_NUM_THREADS"):
        # Ranks of one host share its cores; MXNet's OpenMP would otherwise start one thread
        # per core in every rank. Hosts are assumed to have this host's cores.
        env["OMP_NUM_THREADS"] = str(omp_threads(cores or usable_cores(), per_host))
    notes = [text for flag, text in sorted(UNUSED_FLAGS.items())
             if getattr(args, flag) is not None and getattr(args, flag) is not False]
    mpi = detect(find_mpirun(env, python))
    extra = shlex.split(args.mpi_args) if args.mpi_args else []
    argv, extra_env, more = mpirun_command(
        mpi, args.num_proc, args.command, hosts=hosts, ssh_port=args.ssh_port,
        ssh_identity_file=args.ssh_identity_file, ssh_command=args.ssh_command,
        nics=args.nics, env=env, extra_args=extra)
    env.update(extra_env)
    return mpi, argv, env, notes + more


def _setup_logging(verbose):
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("mxhorovodrun: %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(logging.INFO if verbose else logging.WARNING)


def main(argv=None, execve=os.execve):
    """Runs mxhorovodrun with ``argv`` (default sys.argv[1:]). Does not return when mpirun
    starts (the process becomes mpirun); returns 0 after --version or --check-build, 1 when
    the job cannot start (the reason is printed). Bad flags exit with status 2."""
    args = parse_args(argv)
    _setup_logging(args.verbose)
    if args.version:
        import mxhorovod
        print(mxhorovod.__version__)
        return 0
    if args.check_build:
        from mxhorovod.runner.check_build import check_build_text
        print(check_build_text(verbose=args.verbose))
        return 0
    try:
        mpi, cmd, env, notes = prepare(args)
    except (LaunchError, ValueError) as e:
        log.error("error: %s", e)
        return 1
    for note in notes:
        log.warning("warning: %s", note)
    log.info("%s %s: %s", mpi.flavour, mpi.version, mpi.path)
    log.info("%s", " ".join(shlex.quote(a) for a in cmd))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        execve(cmd[0], cmd, env)
    except OSError as e:
        log.error("error: cannot run %s: %s", cmd[0], e.strerror or e)
        return 1
    return 0  # only when execve was replaced (tests)


def run_commandline():
    """Entry point of the ``mxhorovodrun`` console script."""
    return main()
