"""The mpirun command line of one job: from mxhorovodrun's parsed flags to (mpi, argv, env,
notes). Used by the launcher's main (launch) and by the elastic driver, once per job."""
import os
import shlex
import sys
import tempfile

from mxhorovodrun.cores import usable_cores
from mxhorovodrun.guard import OMP_MARKER, guarded_command
from mxhorovodrun.horovod_alias import alias_pythonpath
from mxhorovodrun.hosts import assign_ranks, parse_hostfile, parse_hosts
from mxhorovodrun.mpi import (HYDRA, INTEL_MPI, LaunchError, detect, find_mpirun,
                              mpirun_command)
from mxhorovodrun.output import capture_patterns
from mxhorovodrun.settings import UNUSED_FLAGS, horovod_env, omp_threads
from mxhorovodrun.slurm import omp_threads_in, outside_note, ranks_per_node

__all__ = ["hosts_of", "captures_output", "prepare"]


def hosts_of(args):
    """[(host, slots), ...] of -H or --hostfile, or None for this host (ValueError if bad)."""
    return parse_hosts(args.hosts) if args.hosts else \
        parse_hostfile(args.hostfile) if args.hostfile else None


def captures_output(mpi):
    """Whether the launcher relays the ranks' output itself: under hydra and Intel MPI,
    always. Their -l tags each chunk a rank writes, not each line, so under
    PYTHONUNBUFFERED=1 (a print is two writes) the ranks' lines came out cut and run
    together (``[0] loss 0.5[1] loss 0.6``); the relay prints whole lines, as horovodrun
    does, and also gives --output-filename and --prefix-output-with-timestamp. Open MPI
    tags lines and does both itself."""
    return mpi.flavour in (HYDRA, INTEL_MPI)


def prepare(args, environ=None, python=None, cores=None, capture_dir=None, timeout=None):
    """What to run for the parsed ``args``: (mpi, argv, env, notes).

    ``env`` is ``environ`` (default os.environ) plus the HOROVOD_* variables of the flags,
    the -x variables, OMP_NUM_THREADS when not already set (see below), what the MPI
    needs (hydra's ssh arguments), and with ``args.horovod_alias`` the alias folder first on PYTHONPATH
    (see :mod:`mxhorovodrun.horovod_alias`). Each rank's command runs behind
    mxhorovod/rank_guard.py, by ``python`` (default sys.executable), unless
    ``args.rank_guard`` is False (see :mod:`mxhorovodrun.guard`). ``notes`` are warnings for the user. When
    :func:`captures_output`, argv sends the ranks' output to the pipes of ``capture_dir``
    (default: a new temporary directory, the caller's to remove). ``timeout``: seconds for
    ``mpirun --version`` (default 60).

    OMP_NUM_THREADS, when the user did not set it: ``cores`` (default: this process's usable
    cores) // the most ranks any host runs; inside a Slurm allocation (``args.slurm``) the
    least of each node's CPUs (SLURM_JOB_CPUS_PER_NODE) // its ranks. With the rank guard,
    that value is only the fallback: MXHOROVOD_OMP_NUM_THREADS_AUTO=1 marks it as the
    launcher's, and the guard on each host replaces it by that host's CPUs // its ranks
    (see :mod:`mxhorovodrun.guard`).

    Raises:
        LaunchError: no usable mpirun (see :func:`mxhorovodrun.mpi.find_mpirun`), no
            rank guard to put in front of the ranks, or no alias folder for
            ``args.horovod_alias``.
        ValueError: bad hosts or host file, or more processes than slots.
    """
    env = dict(os.environ if environ is None else environ)
    hosts = hosts_of(args)
    alloc = getattr(args, "slurm", None)
    if hosts:
        per_host = max(n for _, n in assign_ranks(hosts, args.num_proc))
    elif alloc is not None:
        per_host = max(ranks_per_node(alloc.tasks_per_node, args.num_proc))
    else:
        per_host = args.num_proc
    env.update(horovod_env(args))
    for item in args.env:
        name, eq, value = item.partition("=")
        if eq:
            env[name] = value
    if getattr(args, "horovod_alias", None):
        # After -x: a PYTHONPATH given there keeps its entries, behind the alias.
        try:
            env["PYTHONPATH"] = alias_pythonpath(env.get("PYTHONPATH"))
        except FileNotFoundError as e:
            raise LaunchError(str(e)) from None
    guarded = getattr(args, "rank_guard", None) is not False
    if not env.get("OMP_NUM_THREADS"):
        # Ranks of one host share its cores; MXNet's OpenMP would otherwise start one thread
        # per core in every rank. Here, other hosts are taken to have this host's cores (in
        # Slurm, the CPUs it gave the job on each node); the rank guard on each host
        # corrects that from the host's own CPUs and ranks, as the marker allows.
        threads = omp_threads_in(alloc, args.num_proc) if alloc is not None else None
        if threads is None:
            threads = omp_threads(cores or usable_cores(), per_host)
        env["OMP_NUM_THREADS"] = str(threads)
        if guarded:
            env[OMP_MARKER] = "1"
    else:
        env.pop(OMP_MARKER, None)  # the user's value (or -x): never replaced
    notes = [text for flag, text in sorted(UNUSED_FLAGS.items())
             if getattr(args, flag) is not None and getattr(args, flag) is not False]
    if alloc is not None and not args.nics:
        note = outside_note(alloc, env)
        if note:
            notes.append(note)
    path = find_mpirun(env, python)
    mpi = detect(path) if timeout is None else detect(path, timeout=timeout)
    extra = shlex.split(args.mpi_args) if args.mpi_args else []
    capture = None
    if captures_output(mpi):
        capture = capture_patterns(capture_dir or tempfile.mkdtemp(prefix="mxhorovodrun-"))
    command = list(args.command)
    if guarded:
        try:
            command = guarded_command(command, python or sys.executable)
        except FileNotFoundError as e:
            raise LaunchError(str(e)) from None
    argv, extra_env, more = mpirun_command(
        mpi, args.num_proc, command, hosts=hosts, ssh_port=args.ssh_port,
        ssh_identity_file=args.ssh_identity_file, ssh_command=args.ssh_command,
        nics=args.nics, env=env, extra_args=extra,
        binding_args=shlex.split(args.binding_args) if args.binding_args else None,
        tcp=args.tcp_flag, capture=capture, output_filename=args.output_filename,
        timestamp_output=args.prefix_output_with_timestamp)
    env.update(extra_env)
    return mpi, argv, env, notes + more
