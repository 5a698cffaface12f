"""Run one rank under a guard that names it when it is killed, even by SIGKILL.

    mpirun -np 4 python /path/to/mxhorovod/rank_guard.py python train.py --epochs 3

(the path: ``python -c "import os, mxhorovod; print(os.path.dirname(mxhorovod.__file__))"``;
run it by path, not with ``-m``, so the guard does not import MXNet). ``mxhorovodrun`` puts
it in front of every rank (as ``python -I -S /path/to/mxhorovod/rank_guard.py ...``).

Why: MPICH's mpirun ends the job when a rank dies, but its banner names a pid, and when it
has already killed the other ranks it may name one of those instead (seen here for SIGKILL
and SIGTERM). A process killed by SIGKILL cannot say anything itself. The guard is the
process mpirun starts; it starts the rank as its child (same environment and file
descriptors, so MPI starts as usual) and waits for it:

- the rank is killed by a signal: the guard prints
  ``[1]<error> 2024-05-01 12:00:03.125 mxhorovod: rank 1 (pid 4242 on host) was killed by
  SIGKILL (signal 9); mpirun ends the job`` and then dies of the same signal, so mpirun sees
  what it would have seen without the guard;
- the rank exits: the guard exits with the same code; but when MPI was running in it and it
  ended without mxhorovod's exit (``os._exit()``, or an end that skips Python's exit
  handlers), mpirun kills every other rank by SIGKILL, with no word from them, and the job
  "succeeded" when that code was 0: the guard prints ``[1]<error> ... rank 1 (pid 4242 on
  host) exited with code 0 while MPI was running in it, without finalizing it ...`` and
  exits with code 1 instead of 0 (the rank writes its state over byte 0 of an unlinked
  file, a memfd, named to it as descriptor:device:inode in MXHOROVOD_GUARD_FD, so a rank that
  starts and stops many times fills nothing: ``I`` when ``hvd.init()`` has started, ``E``
  after its exit handler finalized MPI, ``A`` before an unhandled exception's MPI_Abort,
  which reports itself);
- the command cannot be run (not found, not executable): the guard says so and exits with
  status 255, as mpirun does when it cannot run the command itself;
- the guard itself is killed (mpirun's cleanup after another rank died): the kernel kills
  the rank with it (PR_SET_PDEATHSIG), and nothing is printed for it; a keeper process
  (below) kills what the rank forked.

What the rank forked (a multiprocessing pool, DataLoader workers, a ``subprocess``) is
killed when the rank is killed by a signal or the guard is killed, as mpirun kills it without
the guard: hydra ends a job by SIGKILL to each rank's process group, which is the guard's,
not the rank's (see below). Before, such a process lived on (a busy pool worker, a
``sleep`` the rank started), holding the rank's output pipes open, and mpirun, and so the
job, waited for it: a rank killed mid-job hung the job until the last of them ended. The
keeper is a fork of the guard, in a process group of its own (hydra's SIGKILL of the
guard's group does not reach it; the signals forwarded to the rank's group do not either),
holding no descriptor but the read end of a pipe from the guard: when that pipe ends
without a word from the guard (the guard was killed), it kills the rank's group by SIGKILL.
A rank that exits (any code) leaves what it forked running, as without the guard.

Standard input: hydra feeds the launcher's standard input to rank 0 only, and gives every
other rank a pipe that never ends, so a rank other than 0 that read it (``input()``,
``sys.stdin.read()``) waited forever and the job never ended. Under hydra
(HYDI_CONTROL_FD set) the guard gives ranks other than 0 /dev/null instead: they read an
end of file at once, as under Open MPI (and horovodrun), which feeds rank 0 alone too.

SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to the guard go to the rank's
process group, once: the rank runs in a process group of its own (it and what it forks), so
that a launcher that signals the guard's process group (MPICH's hydra does, for a Ctrl-C or
SIGTERM of mpirun) reaches the rank through the guard alone (in the guard's group the
rank got such a signal twice, from the launcher and forwarded, and a second SIGINT
interrupted its KeyboardInterrupt handling). A signal that comes while the rank starts is
forwarded once it runs; one the guard was started ignoring stays ignored, for the rank too.

The rank number is the launcher's (PMI_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK or
SLURM_PROCID). The lines above, but the one of a command that cannot be run, follow
HOROVOD_LOG_LEVEL (``fatal`` silences them) and HOROVOD_LOG_HIDE_TIME. Standard library
only; Linux. ``mxhorovodrun`` puts the guard in front of every rank unless given
``--no-rank-guard`` (or ``MXHOROVOD_RANK_GUARD=0``).
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
    # Handlers first: a signal that comes while the rank starts is held, then forwarded
    # (it ended the guard, and the rank with it by PR_SET_PDEATHSIG).
    rank = {"group": None, "held": [], "ended": False}

    def forward(sig, _frame):
        if rank["ended"]:
            return
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
