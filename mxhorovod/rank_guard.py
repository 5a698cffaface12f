"""Run one rank under a guard that names it when it is killed, even by SIGKILL.

    mpirun -np 4 python /path/to/mxhorovod/rank_guard.py python train.py --epochs 3

(the path: ``python -c "import os, mxhorovod; print(os.path.dirname(mxhorovod.__file__))"``;
run it by path, not with ``-m``, so the guard does not import MXNet). A launcher can put it
in front of every rank.

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
  file, named to it as descriptor:device:inode in MXHOROVOD_GUARD_FD, so a rank that
  starts and stops many times fills nothing: ``I`` when ``hvd.init()`` has started, ``E``
  after its exit handler finalized MPI, ``A`` before an unhandled exception's MPI_Abort,
  which reports itself);
- the guard itself is killed (mpirun's cleanup after another rank died): the kernel kills
  the rank with it (PR_SET_PDEATHSIG), and nothing is printed for it.

SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to the guard go to the rank. The
rank number is the launcher's (PMI_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK or SLURM_PROCID).
The line follows HOROVOD_LOG_LEVEL (``fatal`` silences it) and HOROVOD_LOG_HIDE_TIME.
Standard library only; Linux.
"""
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
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


def _die_with_parent(parent):
    """In the child, before exec: die (SIGKILL) when the guard dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the guard died before prctl took effect
        os._exit(1)


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
    notes_file = tempfile.TemporaryFile()  # the rank's state, in byte 0: see the docstring
    notes = notes_file.fileno()
    os.set_inheritable(notes, True)
    st = os.fstat(notes)  # the rank checks it writes this file, not one the script opened
    env = dict(os.environ, MXHOROVOD_GUARD_FD="%d:%d:%d" % (notes, st.st_dev, st.st_ino))
    # close_fds=False: the rank needs the launcher's descriptors (PMI_FD and the like).
    child = subprocess.Popen(argv, close_fds=False, env=env,
                             preexec_fn=lambda: _die_with_parent(guard))
    for sig in _FORWARDED:
        signal.signal(sig, lambda s, _frame: child.send_signal(s))
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # a forwarded signal interrupted the wait
            continue
    if code >= 0:
        state = _last_note(notes)
        if state != b"I":
            return code
        text = _line("rank %s (pid %d on %s) exited with code %d while MPI was running in it, "
                     "without finalizing it (os._exit(), or an end that skipped Python's exit "
                     "handlers, after hvd.init()): mpirun kills the other ranks (SIGKILL, "
                     "nothing printed by them)%s" % (
                         _rank(), child.pid, socket.gethostname(), code,
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
                 % (_rank(), child.pid, socket.gethostname(), name, sig))
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
