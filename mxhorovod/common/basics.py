"""Process-level state: init/shutdown, the job's topology, and what this build supports.

Names, arguments and errors follow ``horovod.mxnet`` (0.28), so a script written for
``import horovod.mxnet as hvd`` runs unchanged with ``import mxhorovod as hvd``.
"""
import atexit
import logging
import numbers
import os
import signal
import socket
import sys
import threading
import warnings

import mxhorovod._core as _core
from mxhorovod.common import failures, launcher_connection, log, naming, slurm_check, state
from mxhorovod.common import process_sets as _ps
from mxhorovodrun.cores import cgroup_cpu_limits

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "mpi_threads_supported", "mpi_built", "mpi_enabled",
    "gloo_built", "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built", "is_homogeneous", "start_timeline", "stop_timeline",
]

_atexit_registered = False
# One init() or shutdown() at a time: a second thread's init() while the first was starting
# joined the starting background thread (it waits forever) and reset the automatic names
# after the first had returned; two shutdown() calls joined the thread together (a hang).
_init_lock = threading.RLock()
# A rank failing before init() while another library (mpi4py) runs MPI ends the job too.
failures.install_before_init()


def init(comm=None, process_sets=None):
    """Start mxhorovod on this process: MPI (unless already started), and the background
    thread that negotiates and runs every collective.

    Args:
        comm: None for MPI_COMM_WORLD; an mpi4py communicator, whose ranks form the job; or
            a list of ranks of MPI_COMM_WORLD (only those ranks call ``init``; under
            MPICH the others must still start MPI, e.g. by importing mpi4py). The library
            always works on its own duplicate, so the caller may keep using ``comm`` (and
            mpi4py in general) beside it.
        process_sets: a list of :class:`mxhorovod.ProcessSet` (or rank lists) to register
            now, ids 1, 2, ... in this order (every rank must pass the same list; each set
            gets its ``process_set_id``; a set with every rank is the global set, id 0); or the string ``"dynamic"`` to allow
            ``add_process_set`` / ``remove_process_set`` later (as
            HOROVOD_DYNAMIC_PROCESS_SETS=1 does).

    Calling ``init`` again while running does nothing (a ``UserWarning`` says so when it is
    given process sets that are not registered, or a ``comm`` of other ranks than the
    running job's); ``init`` after ``shutdown`` starts anew. MPI is finalized at exit, and
    only if mxhorovod initialized it.

    On jobs of two or more ranks, an unhandled exception (or a fatal signal) on any rank is
    logged with that rank's number and ends the whole job with a non-zero exit code
    (``MPI_Abort``); see :mod:`mxhorovod.common.failures`. HOROVOD_LOG_LEVEL sets the level of the
    'mxhorovod' logger (:mod:`mxhorovod.common.log`), HOROVOD_TIMELINE starts a timeline on rank 0
    (:func:`start_timeline`).

    Raises:
        ValueError: a bad ``comm``, this rank not in the list, a bad HOROVOD_* variable, or
            process sets that are invalid or differ between ranks.
        RuntimeError: this process is one task of a Slurm step of several tasks
            (``srun -n4``) but MPI started it alone, as a world of 1
            (``srun --mpi=none``): every task raises it, naming ``srun --mpi=pmi2``.
            MXHOROVOD_SLURM_SINGLE_TASKS=1 allows such one-process tasks (see
            docs/slurm.md).
    """
    with _init_lock:
        _init(comm, process_sets)


def _init(comm, process_sets):
    global _atexit_registered
    static, dynamic = _ps.static_sets(process_sets)
    comm_f2c, ranks = _core.WORLD_COMM, []
    if comm is None:
        pass
    elif isinstance(comm, (list, tuple)):
        for r in comm:
            # Not int(r): a float would be truncated (1.7 is not rank 1), as for root_rank.
            if isinstance(r, bool) or not isinstance(r, numbers.Integral):
                raise ValueError("init(comm=%r): ranks must be integers, not %s"
                                 % (list(comm), type(r).__name__))
        ranks = [int(r) for r in comm]
        if not ranks:
            raise ValueError("init(comm=[]): the list of ranks is empty")
        if len(set(ranks)) != len(ranks):
            raise ValueError("init(comm=%r): ranks are listed twice" % (list(comm),))
    elif hasattr(comm, "py2f"):
        comm_f2c = int(comm.py2f())
    else:
        raise ValueError("init(comm=...) takes None, a list of ranks or an mpi4py communicator, "
                         "not %s" % type(comm).__name__)
    comm_sets = [p for p in static if p.mpi_comm is not None]
    starting = _core.topology()[0] < 0  # not running, nor stopped by a peer: a new session
    if not starting:
        # Running (init again does nothing), or stopped by a peer (the core refuses): no
        # exchange among the ranks for the sets made from communicators.
        comm_sets = []
    else:
        state.set_init_comm(comm)
    if comm_sets:
        job = state.job_comm()
        if job is None:
            raise ValueError("init(comm=%r): rank %d of MPI_COMM_WORLD is not in the given ranks"
                             % (list(comm), state.world_rank()))
        _ps.resolve_comm_sets(comm_sets, job, "init(process_sets=...)")
        _ps.check_distinct(static)
    logger = log.configure()
    if not _atexit_registered:
        # Registered at init, after mpi4py's own exit hook (if mpi4py is imported), so ours
        # runs first: the background thread stops before anyone finalizes MPI. Before
        # _core.init: an init() refused after MPI started (a setting that differs between
        # ranks) must still finalize MPI at exit, else the launcher kills the job with
        # SIGKILL (exit status 9) when that rank ends before its peers.
        atexit.register(_at_exit)
        _atexit_registered = True
    _finalize_in_multiprocessing_child()
    # The cgroups' CPU quotas: a container sees every core of the machine but may use fewer
    # (mxhorovodrun.cores); the core adds up the host's ranks to size its waits.
    quotas = ";".join("%s=%r" % (key, cpus) for cpus, key, _ in cgroup_cpu_limits())
    _core.init(comm_f2c, ranks, [p.ranks for p in static if p.ranks is not None], dynamic,
               quotas)
    if starting:
        try:
            # srun's tasks started as separate worlds of 1 (--mpi=none): refused, not left
            # to train alone (mxhorovod.common.slurm_check).
            slurm_check.check_world(_core.mpi_world()[2])
        except (RuntimeError, ValueError):
            _core.shutdown()
            raise
    if starting:
        # The sets' ids start from 1 again, their unnamed calls from 0 (the global set's
        # too when this session has other ranks than the last).
        naming.new_session(_session_members(comm, ranks))
    _ps.registered(static)
    if not starting:
        _warn_ignored(comm, ranks, static)
    rank_, size_, local_rank_, local_size_ = _core.topology()[:4]
    log.set_rank(rank_)
    failures.install(rank_, size_)
    _end_by_sigterm_in_multiprocessing_child()
    if size_ > 1:  # mpirun kills the peers when this rank ends without finalizing MPI
        failures.note_to_guard(b"I")
    logger.info("rank %d of %d (local rank %d of %d): pid %d on %s", rank_, size_, local_rank_,
                local_size_, os.getpid(), socket.gethostname())


def _warn_ignored(comm, ranks, static):
    """init() again while running does nothing (Horovod's rule): says so when the call
    asked for something this session does not have (another job, process sets), which the
    script would otherwise find out only later, from a set 'not registered' although it
    passed it to init(), or a job of other ranks than it asked for."""
    asked = []
    unregistered = [p for p in static if p.process_set_id is None]
    if unregistered:
        asked.append("the process sets (%s) are not registered"
                     % ", ".join("ranks %s" % (p.ranks,) if p.ranks is not None
                                 else "of an mpi4py communicator" for p in unregistered))
    if comm is not None and naming.session_members() is not None and \
            _session_members(comm, ranks) != naming.session_members():
        asked.append("the job keeps its ranks %s of MPI_COMM_WORLD"
                     % (list(naming.session_members()),))
    if asked:
        warnings.warn("hvd.init() while mxhorovod is running does nothing: %s. Call "
                      "hvd.shutdown() first to start anew with these arguments (or add the "
                      "sets with hvd.add_process_set(), with dynamic process sets on)"
                      % "; ".join(asked), UserWarning, stacklevel=4)


def _session_members(comm, ranks):
    """The MPI_COMM_WORLD ranks of the job that ``init(comm)`` started (a sorted tuple), found
    without communication: ``ranks`` (init's list), the mpi4py communicator's, or all."""
    if ranks:
        return tuple(sorted(ranks))
    world_size = _core.mpi_world()[2]
    if comm is None:
        return tuple(range(world_size))
    from mpi4py import MPI  # comm is an mpi4py communicator
    return tuple(sorted(MPI.Group.Translate_ranks(comm.Get_group(), list(range(comm.Get_size())),
                                                  MPI.COMM_WORLD.Get_group())))


_mp_hook_pid = None  # the multiprocessing child whose exit runs _at_exit (see below)


def _finalize_in_multiprocessing_child():
    """In a process that ``multiprocessing`` started (a forked child that forms the job,
    or calls init() and is refused), registers :func:`_at_exit` to run when the process
    ends. Its ``Process`` ends with ``os._exit()``, which skips atexit handlers and C exit
    handlers: MPI was never finalized there, nor the launcher told (MPICH does that in a C
    exit handler, see :mod:`mxhorovod.common.launcher_connection`), so MPICH's launcher killed the
    job's other ranks (SIGKILL, often silently) when the rank exited, and mxhorovodrun's
    rank guard failed the job ("exited ... without finalizing it"), although the script did
    nothing wrong. A process forked by ``os.fork()`` that started MPI must end by
    ``sys.exit()`` (or return), not ``os._exit()``."""
    global _mp_hook_pid
    mp = sys.modules.get("multiprocessing")
    if mp is None or _mp_hook_pid == os.getpid() or mp.parent_process() is None:
        return
    import multiprocessing.util
    multiprocessing.util.Finalize(None, _at_exit_of_multiprocessing_child, exitpriority=0)
    _mp_hook_pid = os.getpid()


def _end_by_sigterm_in_multiprocessing_child():
    """In a ``multiprocessing`` child that formed the job: SIGTERM (``Process.terminate()``,
    and ``Pool.terminate()``, which a ``with Pool() as p:`` block calls at its end, on
    workers that wait for tasks) ends it as ``sys.exit()`` does, so that its exit finalizes
    MPI and tells the launcher. It died of the signal: mpirun took the rank for crashed
    and killed the job's other ranks by SIGKILL, silently, with exit status 0 (a Pool worker
    that called hvd.init(), ended by ``with Pool(1) as p:``). Only where SIGTERM has its
    default action, from the main thread, and in this process: a process it forks dies of
    SIGTERM as before. Python runs the handler between bytecodes: a child inside a long C
    call (a wait on a collective) ends when that call returns, not at once."""
    if _mp_hook_pid != os.getpid() or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:  # the script's (or not Python's)
        return
    import multiprocessing.util
    pid = os.getpid()
    ending = []

    def on_sigterm(sig, frame):
        if os.getpid() != pid:  # a child forked later: dies of it, as by default
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            return
        # Already ending (a Pool worker that got its sentinel, then the SIGTERM): raising
        # now would cut its exit short before it told the launcher (seen: the job killed).
        if ending or getattr(multiprocessing.util, "_exiting", False):
            return
        ending.append(sig)
        raise SystemExit(128 + sig)

    signal.signal(signal.SIGTERM, on_sigterm)


def _at_exit_of_multiprocessing_child():
    """:func:`_at_exit`, then, if it finalized MPI, the word to the launcher that MPICH's C
    exit handler would have said (the process ends by ``os._exit()``)."""
    if not _at_exit():
        return
    failed = launcher_connection.finalize()
    if failed:
        logging.getLogger("mxhorovod").warning(
            "a multiprocessing child that finalized MPI could not tell the launcher so (%s): "
            "it may take this process for crashed and end the job", failed)


_exited_pid = None  # the process whose _at_exit ran
_after_local_work = []  # see after_local_work()


def after_local_work(hook):
    """Registers ``hook()`` to run at shutdown and exit, once this rank's called
    collectives have all run (not when they stopped completing). Checks that read their
    last results then register here (mxhorovod.checks.batch_check)."""
    if hook not in _after_local_work:
        _after_local_work.append(hook)


def _at_exit():
    """At interpreter exit: let this rank's last collectives run, then stop and finalize.

    A training loop returns from its last ``step()`` before the collectives it called have
    run (they are queued in MXNet's engine); stopping at once would shut down every rank
    while a peer still waits for them (seen: rank 0's last step failed with "a peer rank
    shut down" when rank 1 finished first). So a normal exit first waits for them, while
    they keep completing (it gives up after 10 s, or the stall check time if shorter,
    without one completing: a peer blocked in a collective this rank never calls). Not
    after an uncaught exception: the job is failing, and the peers should hear so at once.
    Returns whether it finalized MPI (started by mxhorovod in this process)."""
    global _exited_pid
    if _exited_pid == os.getpid():  # a multiprocessing child's hook ran, and now atexit's
        return False
    _exited_pid = os.getpid()
    if getattr(sys, "last_value", None) is None:
        _let_called_collectives_run("exit")
    finalized = _core.finalize_mpi()
    failures.note_to_guard(b"E")
    return finalized


def _let_called_collectives_run(what):
    """Waits while this rank's called collectives keep completing (core WaitLocalWork: gives
    up after 10 s, or the stall check time, without one completing), warning if it gives up;
    when they all ran, runs the hooks of :func:`after_local_work` (the trainers' last
    batch-size checks).
    Also when a peer's shutdown has stopped mxhorovod here already: this rank's collectives
    have then completed or failed, so the checks read at once (a failed one says nothing)."""
    if _core.is_initialized() and not _core.wait_local_work():
        logging.getLogger("mxhorovod").warning(
            "%s: collectives called on this rank stopped completing (none for 10 s, or the "
            "stall check time); stopping anyway (their peers get an error)", what)
        return
    for hook in _after_local_work:
        hook()


def shutdown():
    """Stop mxhorovod on this process and, with it, on every rank of the job (Horovod's
    semantics): operations still pending on any rank fail with an error that names them.
    Safe to call twice or before ``init``.

    First, as at the end of the process, the collectives this rank has called are let run
    (while they keep completing; at most 10 s, or the stall check time if shorter, without
    one completing): a training loop's last ``step()`` returns before its collectives have
    run, and a script ending with ``hvd.shutdown()`` failed that step on every rank (its
    own "did not run: mxhorovod is not running", the peers' "a peer rank shut down", as
    Horovod's "Horovod has been shut down").

    Process sets registered in this session lose their ids (``process_set_id`` None): the
    next session numbers its sets from 1 again, so an old id could name another set."""
    with _init_lock:
        _let_called_collectives_run("shutdown()")
        _core.shutdown()
        _ps.end_session()  # their ids may name other sets in the next session


def start_timeline(file_path, mark_cycles=False):
    """Start recording a timeline to ``file_path`` (Horovod's ``hvd.start_timeline``).

    The file is a Chrome trace event file (open it in https://ui.perfetto.dev or
    chrome://tracing; summarize it with ``python -m mxhorovod.timeline summary FILE``): one
    row per tensor name, with its negotiation (when each rank became ready) and its
    activities (QUEUE, MEMCPY_IN_FUSION_BUFFER, MPI_ALLREDUCE, ..., in microseconds). See
    docs/timeline.md. As in Horovod, rank 0 writes it; on the other ranks this does nothing.
    Setting HOROVOD_TIMELINE=path before ``init()`` starts one at ``init()``
    (HOROVOD_TIMELINE_MARK_CYCLES=1 for ``mark_cycles``).

    Args:
        file_path: path of the JSON file; an existing file is overwritten.
        mark_cycles: also record an instant event CYCLE_START for each background cycle
            that ran collectives.
    Raises:
        ValueError: before ``init()``; on rank 0, when the file cannot be opened or a
            timeline is already being recorded (call :func:`stop_timeline` first).
    """
    state.topology()
    _core.start_timeline(os.fspath(file_path), bool(mark_cycles))


def stop_timeline():
    """Stop recording the timeline and complete its file (valid JSON from then on).

    ``shutdown()`` (and the exit of the process) also does it. Raises ValueError before
    ``init()``; does nothing when no timeline is being recorded."""
    state.topology()
    _core.stop_timeline()


def is_initialized():
    """True between ``init()`` and ``shutdown()`` (or a peer's shutdown)."""
    return _core.is_initialized()


def rank():
    """This process's rank in the job, 0 <= rank < size(). Raises ValueError before init."""
    return state.topology()[0]


def size():
    """Number of processes in the job. Raises ValueError before init."""
    return state.topology()[1]


def local_rank():
    """Rank among the processes on this host (grouped by host name)."""
    return state.topology()[2]


def local_size():
    """Number of processes on this host."""
    return state.topology()[3]


def cross_rank():
    """Rank of this host among the hosts, counting the processes with this local_rank."""
    return state.topology()[4]


def cross_size():
    """Number of processes with this process's local_rank (the hosts, when homogeneous)."""
    return state.topology()[5]


def is_homogeneous():
    """True when every host runs the same number of processes."""
    state.topology()
    return size() == local_size() * cross_size()


def mpi_threads_supported():
    """True when MPI provides MPI_THREAD_MULTIPLE (so mpi4py can be used beside us)."""
    state.topology()
    return _core.mpi_threads_supported()


def mpi_built():
    """True: this build runs its collectives on MPI."""
    return True


def mpi_enabled():
    """True: MPI is the controller and transport of this build."""
    return True


def gloo_built():
    """False: this build has no Gloo."""
    return False


def gloo_enabled():
    """False: this build has no Gloo."""
    return False


def nccl_built():
    """NCCL version as an int (e.g. 21803), 0 when built without NCCL (this build)."""
    return 0


def ddl_built():
    """False: this build has no IBM DDL."""
    return False


def ccl_built():
    """False: this build has no oneCCL."""
    return False


def cuda_built():
    """False: this build is CPU-only."""
    return False


def rocm_built():
    """False: this build is CPU-only."""
    return False
