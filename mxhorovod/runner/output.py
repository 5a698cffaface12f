"""The ranks' output read by the launcher under MPICH's hydra (and Intel MPI's, which is
hydra too): whole lines on the console, --output-filename and --prefix-output-with-timestamp.

Hydra's -l tags each chunk a rank writes, not each line (under PYTHONUNBUFFERED=1 a print
is two writes, and two ranks' lines run together), and hydra has neither a per-rank
directory layout (its -outfile-pattern needs the directories to exist) nor timestamps. So
mxhorovodrun stays the parent of mpirun and gives it, through -outfile-pattern and
-errfile-pattern, one named pipe per rank and stream in a private temporary directory:
mpiexec writes each rank's stdout and stderr there (on the launching host, also for ranks on
other hosts), and the launcher reads them, cuts the bytes into lines, and writes each line

- to its own stdout or stderr as ``[rank] line`` (what mpirun -l prints), and
- with --output-filename DIR, to DIR/rank.<rank>/stdout or DIR/rank.<rank>/stderr as the
  rank wrote it (horovodrun's layout; the rank padded with 0s to the width of the largest),

each after ``time.asctime()`` and a space with --prefix-output-with-timestamp. mpirun's own
messages (hydra's errors) are not the ranks' and go straight to the console, unstamped.

mpirun runs in a session of its own, so that only the launcher gets the terminal's signals
and hands each on once: a Ctrl-C in the terminal used to reach mpirun twice (from the
terminal, as a member of the foreground process group, and forwarded by the launcher),
and hydra takes a second SIGINT as "Press Ctrl-C again to force abort": the ranks were
killed in the middle of their KeyboardInterrupt handling. It also gets SIGTERM when the
launcher dies (SIGKILL, the OOM killer): the job ended with an exec'ed mpirun; with mpirun
as an orphan the ranks ran on to the end, their output lost.
"""
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

__all__ = ["pad_rank", "rank_dir", "capture_patterns", "run_captured"]

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_STREAMS = ("stdout", "stderr")


def pad_rank(rank, size):
    """horovodrun's padding: rank 3 of 12 -> '03' (lexicographical order of the files)."""
    return str(rank).zfill(len(str(max(size - 1, 0))))


def rank_dir(output_filename, rank, size):
    """DIR/rank.<padded rank>."""
    return os.path.join(output_filename, "rank.%s" % pad_rank(rank, size))


def capture_patterns(capture_dir):
    """(stdout pattern, stderr pattern) for hydra's -outfile-pattern / -errfile-pattern."""
    return tuple(os.path.join(capture_dir, "%s.%%r" % stream) for stream in _STREAMS)


class _Sink:
    """Where one stream of the ranks goes: the console (shared, one lock) and the files."""

    def __init__(self, console, timestamps):
        self.console = console
        self.timestamps = timestamps
        self.lock = threading.Lock()

    def line(self, rank, data, file, end=False):
        """One line of ``rank`` (``end``: its last, without a newline: the console gets one,
        so that the next rank's line starts on a line of its own; the file does not)."""
        stamp = (time.asctime() + " ").encode() if self.timestamps else b""
        with self.lock:
            if self.console is not None:
                try:
                    self.console.write(stamp + b"[%d] " % rank + data + (b"\n" if end else b""))
                    self.console.flush()
                except OSError:
                    self._console_gone()
        if file is not None:
            file.write(stamp + data)
            file.flush()

    def _console_gone(self):
        # The console's reader went away ("mxhorovodrun ... | head") or its terminal hung
        # up. The reader thread used to die of it (a BrokenPipeError traceback): the rank's
        # pipe closed, the rest of its output lost, --output-filename's files cut short.
        # Now only the console is dropped and relaying to the files goes on; the console's
        # descriptor gets /dev/null, so that the flush at exit has nothing to fail on
        # (Python's recipe for BrokenPipeError).
        console, self.console = self.console, None
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, console.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass  # not a file of its own (a test's BytesIO): dropping it is enough


def _read(fd, rank, sink, file):
    """Relays one rank's stream until its pipe ends; closes the pipe and the file."""
    pending = []  # pieces of the unfinished line: joined once it ends (a long line is
    try:          # read in many chunks; re-joining it at every chunk was quadratic)
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            if b"\n" not in chunk:
                pending.append(chunk)
                continue
            *lines, rest = chunk.split(b"\n")
            lines[0] = b"".join(pending) + lines[0]
            pending = [rest] if rest else []
            for text in lines:
                sink.line(rank, text + b"\n", file)
        if pending:
            sink.line(rank, b"".join(pending), file, end=True)
    finally:
        os.close(fd)
        if file is not None:
            file.close()


_PR_SET_PDEATHSIG = 1


def _libc_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no parent-death signal
        return None


def _mpirun_setup(prctl, launcher_pid):
    """Runs in mpirun's process before its exec: SIGTERM when the launcher dies (also when
    it died before this ran). Only system calls: the launcher's other threads may hold
    locks at the fork."""
    def setup():
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != launcher_pid:
                os.kill(os.getpid(), signal.SIGTERM)
    return setup


def _exit_status(code):
    return 128 - code if code < 0 else code


def run_captured(argv, env, np, capture_dir, output_filename=None, timestamps=False,
                 console=None, popen=subprocess.Popen):
    """Runs ``argv`` (an mpirun command line whose -outfile-pattern / -errfile-pattern are
    :func:`capture_patterns` of ``capture_dir``, an empty directory) and relays each of the
    ``np`` ranks' output as the module says; removes ``capture_dir``. Starts mpirun in a
    session of its own and forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to it. Returns mpirun's
    exit status (128 + N when killed by signal N, or when it exits 0 after more than one
    forwarded signal, the last N). ``console``: (stdout, stderr) binary files, default this process's.

    Raises:
        OSError: a directory or file of ``output_filename`` cannot be made, or mpirun cannot
            be started.
    """
    console = console or (sys.stdout.buffer, sys.stderr.buffer)
    sinks = [_Sink(c, timestamps) for c in console]
    readers, threads, writers = [], [], []
    proc = None
    previous = {}
    forwarded = []
    try:
        for rank in range(np):
            files = [None, None]
            if output_filename:
                directory = rank_dir(output_filename, rank, np)
                os.makedirs(directory, exist_ok=True)
                for i, stream in enumerate(_STREAMS):
                    files[i] = open(os.path.join(directory, stream), "wb")
            for i, stream in enumerate(_STREAMS):
                path = os.path.join(capture_dir, "%s.%d" % (stream, rank))
                os.mkfifo(path, 0o600)
                # Our own writer keeps the pipe open: a rank whose mpiexec side is not open
                # yet (or never: a rank that prints nothing) reads as waiting, not as ended.
                rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                readers.append((rfd, rank, sinks[i], files[i]))
                writers.append(os.open(path, os.O_WRONLY))
                os.set_blocking(rfd, True)
        # Its own session: the terminal's signals reach the launcher alone (see the
        # module). The FIFOs are open at both ends already, so mpirun starts before the
        # readers (fewer threads around the fork).
        proc = popen(argv, env=env, start_new_session=True,
                     preexec_fn=_mpirun_setup(_libc_prctl(), os.getpid()))
        for args in readers:
            t = threading.Thread(target=_read, args=args, daemon=True,
                                 name="mxhorovodrun-output")
            t.start()
            threads.append(t)

        def forward(signum, _frame):
            forwarded.append(signum)
            try:
                proc.send_signal(signum)
            except OSError:
                pass
        if threading.current_thread() is threading.main_thread():
            for signum in _FORWARDED:
                previous[signum] = signal.signal(signum, forward)
        code = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        # mpirun is gone: once our writers close, every pipe ends after its last bytes.
        for fd in writers:
            os.close(fd)
        for t in threads:
            t.join(30)
        for rfd, _, _, file in readers[len(threads):]:  # never handed to a thread
            os.close(rfd)
            if file is not None:
                file.close()
        shutil.rmtree(capture_dir, ignore_errors=True)
    if code == 0 and len(forwarded) > 1:
        # Hydra takes a second SIGINT as "force abort": it kills the ranks ('Ctrl-C
        # caught... cleaning up processes') and then exits 0 about one time in three. The
        # job was interrupted: say so, as a shell does for a process killed by a signal.
        return 128 + forwarded[-1]
    return _exit_status(code)
