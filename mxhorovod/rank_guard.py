"""Run one rank as the child of a guard that names it when it dies, even by SIGKILL.

    mpirun -np 4 python /path/to/mxhorovod/rank_guard.py python train.py --epochs 3

Run it by path, not with ``-m``: it imports the standard library only (Linux).
``mxhorovodrun`` puts it in front of every rank unless given ``--no-rank-guard``.
The guard exits with the rank's exit code.
A rank killed by a signal is named, and the guard then dies of the same signal.
A rank that exits with MPI running in it is named, and the guard exits 1, not 0. The rank
writes its state over byte 0 of a memfd that MXHOROVOD_GUARD_FD names: ``I`` once
``hvd.init()`` started, ``E`` once it finalized, ``A`` before an MPI_Abort (self-reported);
the guard writes byte 1 under the elastic driver (below).
A command that cannot be run is named, and the guard exits 255, as mpirun does.
The rank runs in a process group of its own; the guard forwards SIGINT, SIGTERM, SIGHUP,
SIGQUIT, SIGUSR1 and SIGUSR2 to it, so hydra's signals reach the rank once.
If the guard is killed, the rank dies with it (PR_SET_PDEATHSIG), and a keeper (a fork of
the guard in a group of its own) kills the rank's group; the guard kills that group itself
when the rank is killed by a signal. A rank that exits leaves what it forked running.
Under hydra, ranks other than 0 get /dev/null as stdin, not hydra's pipe that never ends.
Lines name the launcher's rank (PMI_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID)
and follow HOROVOD_LOG_LEVEL and HOROVOD_LOG_HIDE_TIME. Users: docs/running.md.
Under mxhorovodrun's elastic driver (MXHOROVOD_ELASTIC=1), the guard holds a connection to
the driver (mxhorovodrun/elastic_protocol.py, loaded by path): it says ``bye`` before it
ends on its own, so a host whose guards all vanish without a word was killed as a whole;
and a SIGTERM to the guard (a preemption notice, a drain) is told to the driver as "this
host is leaving": when the driver takes it, the guard writes ``L`` over byte 1 of the notes
file and keeps the signal from the rank (the job stops at its next commit or check and goes
on without the host: docs/elastic.md); when the run itself is being stopped, ``S``, and
the signal goes on to the rank as usual.
Threads: when MXHOROVOD_OMP_NUM_THREADS_AUTO=1 marks OMP_NUM_THREADS as the launcher's
choice, the guard sets it to this host's CPUs // the ranks on this host (MPI_LOCALNRANKS,
OMPI_COMM_WORLD_LOCAL_SIZE); the CPUs: SLURM_CPUS_ON_NODE inside Slurm, capped by the usable
cores (affinity and cgroup quota, mxhorovodrun/cores.py). The marker is not passed on.
"""
import ctypes
import os
import signal
import subprocess
import sys
import time

_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
              signal.SIGUSR2)
_PR_SET_PDEATHSIG = 1
_OMP_MARKER = "MXHOROVOD_OMP_NUM_THREADS_AUTO"  # mxhorovodrun.guard.OMP_MARKER
_LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


def _rank():
    for var in _RANK_VARS:
        if os.environ.get(var, "").isdigit():
            return os.environ[var]
    return "?"


def _line(message):
    if os.environ.get("HOROVOD_LOG_LEVEL", "").strip().lower() == "fatal":
        return None
    hide = os.environ.get("HOROVOD_LOG_HIDE_TIME", "").strip().lower() in ("1", "true", "yes", "on")
    now = time.time()
    stamp = "" if hide else "%s.%03d " % (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)),
                                           int(now * 1000) % 1000)
    return "[%s]<error> %smxhorovod: %s\n" % (_rank(), stamp, message)


def _host():
    return os.uname().nodename  # socket.gethostname(), without importing socket


def _usable_cores():
    """This process's usable cores by mxhorovodrun/cores.py (affinity capped by the cgroup
    quota), loaded by path from beside this package; its affinity when that is missing."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "mxhorovodrun", "cores.py")
    try:
        import importlib.util
        spec = importlib.util.spec_from_file_location("_mxhorovod_guard_cores", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.usable_cores()
    except (ImportError, OSError, AttributeError, SyntaxError):
        try:
            return len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return os.cpu_count() or 1


def _host_threads(environ):
    """OMP_NUM_THREADS for a rank on this host, or None to keep the environment's: only
    when the launcher marked its value (see the module) and the launcher says how many
    ranks this host runs."""
    if environ.get(_OMP_MARKER) != "1":
        return None
    local = next((int(environ[v]) for v in _LOCAL_SIZE_VARS
                  if environ.get(v, "").isdigit() and int(environ[v]) > 0), None)
    if local is None:
        return None
    cores = _usable_cores()
    slurm = environ.get("SLURM_CPUS_ON_NODE", "")
    if environ.get("SLURM_JOB_ID") and slurm.isdigit() and int(slurm) > 0:
        cores = min(cores, int(slurm))  # the CPUs Slurm gave this job on this node
    return max(1, cores // local)


def _notes_file():
    """A descriptor of an unlinked file for the rank's notes (see the module), inheritable:
    a memfd (no file system; and no import of tempfile: the guard's start is every rank's),
    else a temporary file."""
    try:
        fd = os.memfd_create("mxhorovod-rank-guard")
    except (AttributeError, OSError):  # not Linux 3.17+, or refused (seccomp)
        import tempfile
        fd = os.dup(tempfile.TemporaryFile().fileno())
    os.set_inheritable(fd, True)
    return fd


def _driver_link():
    """elastic_protocol.GuardLink for this rank, or None (no elastic driver, or the
    protocol's file not beside this package)."""
    if os.environ.get("MXHOROVOD_ELASTIC") != "1":
        return None
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "mxhorovodrun", "elastic_protocol.py")
    try:
        spec = importlib.util.spec_from_file_location("_mxhorovod_elastic_protocol", path)
        protocol = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(protocol)
    except (OSError, ImportError, SyntaxError):
        return None
    link = protocol.GuardLink(os.environ, _rank(), _host())
    return link if link.sock is not None else None


def _child_setup(parent):
    """In the child, before exec: a process group of its own (see the module), and die
    (SIGKILL) when the guard dies."""
    os.setpgid(0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the guard died before prctl took effect
        os._exit(1)


def _start_keeper(group):
    """Forks the keeper of the rank's process group ``group`` (see the module); returns the
    write end of its pipe (not inheritable): write a byte to it before the guard ends to
    leave the group alone, or let it close unwritten (the guard killed) to have the keeper
    kill the group by SIGKILL. None when the keeper cannot be started (fork refused)."""
    try:
        rfd, wfd = os.pipe()
    except OSError:
        return None
    # Blocked over the fork: the keeper must not run the guard's forwarding handler (it
    # would send the signal to the rank a second time); it ignores them before unblocking.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(rfd)
        os.close(wfd)
        return None
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(rfd)
        return wfd
    try:  # the keeper: only system calls from here, and os._exit
        for sig in _FORWARDED:
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.setpgid(0, 0)  # out of the guard's group, which hydra's cleanup kills
        # No descriptor but its pipe: holding the rank's output pipes (or PMI's socket)
        # would keep mpirun waiting, as the rank's forks did.
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        keep = os.dup2(rfd, 3) if rfd != 3 else rfd
        os.closerange(4, os.sysconf("SC_OPEN_MAX"))
        while True:
            try:
                word = os.read(keep, 1)
                break
            except InterruptedError:
                continue
        if not word:  # the guard ended without a word: killed
            try:
                os.killpg(group, signal.SIGKILL)
            except OSError:
                pass
    finally:
        os._exit(0)


def _release_keeper(wfd):
    """Tells the keeper to leave the rank's group alone and end."""
    if wfd is None:
        return
    try:
        os.write(wfd, b"x")
    except OSError:
        pass
    os.close(wfd)


def _stdin_for_rank():
    """None (the guard's stdin), or /dev/null for a rank other than 0 under hydra, whose
    stdin is a pipe that never ends (see the module)."""
    rank = _rank()
    if "HYDI_CONTROL_FD" in os.environ and rank not in ("0", "?"):
        return subprocess.DEVNULL
    return None


def _last_note(fd):
    """The last note the rank wrote (b'I', b'E', b'A'), b'' for none."""
    try:
        return os.pread(fd, 1, 0)
    except OSError:
        return b""


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        sys.stderr.write(__doc__)
        return 0 if argv else 2
    guard = os.getpid()
    notes = _notes_file()  # the rank's state, in byte 0: see the docstring
    st = os.fstat(notes)  # the rank checks it writes this file, not one the script opened
    env = dict(os.environ, MXHOROVOD_GUARD_FD="%d:%d:%d" % (notes, st.st_dev, st.st_ino))
    threads = _host_threads(env)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    env.pop(_OMP_MARKER, None)
    # Handlers first: a signal that comes while the rank starts is held, then forwarded
    # (it ended the guard, and the rank with it by PR_SET_PDEATHSIG).
    rank = {"group": None, "held": [], "ended": False, "link": None}

    def forward(sig, _frame):
        if rank["ended"]:
            return
        if sig == signal.SIGTERM and rank["link"] is not None:
            # Byte 1 of the notes file tells the rank's handler (hvd.elastic.run) whether
            # its own SIGTERM is a notice: 'L' (the driver took it), or 'S' (the run is
            # being stopped, or no driver: it dies of it).
            taken = rank["link"].leaving()
            try:
                os.pwrite(notes, b"L" if taken else b"S", 1)
            except OSError:
                pass
            if taken:
                return  # the driver stops the job at its next check (see the module)
        if rank["group"] is None:
            rank["held"].append(sig)
            return
        try:
            os.killpg(rank["group"], sig)  # the rank's group: the rank, and what it forked
        except OSError:  # the group is gone: the rank has ended, its exit comes next
            pass
    for sig in _FORWARDED:
        if signal.getsignal(sig) != signal.SIG_IGN:  # nohup's SIGHUP: the rank's too, as asked
            signal.signal(sig, forward)
    # close_fds=False: the rank needs the launcher's descriptors (PMI_FD and the like).
    try:
        child = subprocess.Popen(argv, close_fds=False, env=env, stdin=_stdin_for_rank(),
                                 preexec_fn=lambda: _child_setup(guard))
    except OSError as e:
        # Said even under HOROVOD_LOG_LEVEL=fatal, as mpirun says it without the guard.
        message = "rank %s (on %s) cannot run %s: %s" % (_rank(), _host(), argv[0],
                                                          e.strerror or e)
        sys.stderr.write(_line(message) or "mxhorovod: %s\n" % message)
        return 255  # mpirun's exit status when it cannot run the command itself
    # Popen returns after the exec, so the rank's group exists now.
    rank["group"] = child.pid
    keeper = _start_keeper(child.pid)
    rank["link"] = _driver_link()  # after the keeper's fork: the keeper must not hold it
    for sig in rank["held"]:
        forward(sig, None)
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # a forwarded signal interrupted the wait
            continue
    rank["ended"] = True  # reaped: its pid, and so its group's id, may be reused
    if code < 0:
        # Killed: what it forked goes too, as hydra's cleanup (SIGKILL to the group of the
        # process it started) kills it without the guard. (Pids, and so group ids, are
        # handed out in sequence: the id of a group that just ended is not reused yet.)
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
    _release_keeper(keeper)
    if rank["link"] is not None:
        rank["link"].send("bye", code)  # ended on its own: not a node-level kill
        rank["link"].close()
    if code >= 0:
        state = _last_note(notes)
        if state != b"I":
            return code
        text = _line("rank %s (pid %d on %s) exited with code %d while MPI was running in it, "
                     "without finalizing it (after hvd.init(): os._exit(), a crash handler "
                     "that exits, as MXNet's does on a segmentation fault, or another end "
                     "that skipped Python's exit handlers): mpirun kills the other ranks (SIGKILL, "
                     "nothing printed by them)%s" % (
                         _rank(), child.pid, _host(), code,
                         "; this guard exits with code 1, not 0" if code == 0 else ""))
        if text:
            sys.stderr.write(text)
            sys.stderr.flush()
        return code or 1
    sig = -code
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = "signal %d" % sig
    text = _line("rank %s (pid %d on %s) was killed by %s (signal %d); mpirun ends the job"
                 % (_rank(), child.pid, _host(), name, sig))
    if text:
        sys.stderr.write(text)
        sys.stderr.flush()
    # Die of the same signal, so the launcher reports what it would have without the guard.
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be handled anyway
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    return 128 + sig


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
