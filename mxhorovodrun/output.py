"""The ranks' output read by the launcher under MPICH's hydra (and Intel MPI's, which is
hydra too): whole lines on the console, --output-filename and --prefix-output-with-timestamp.

mpiexec writes each rank's stdout and stderr (ranks on other hosts included) into one named
pipe per rank and stream (-outfile-pattern, -errfile-pattern), in a private temporary
directory. The launcher cuts what it reads into lines and writes each line

- to its own stdout or stderr as ``[rank] line`` (what mpirun -l prints), and
- with --output-filename DIR, to DIR/rank.<rank>/stdout or DIR/rank.<rank>/stderr as the
  rank wrote it (horovodrun's layout; the rank padded with 0s to the width of the largest),

each after ``time.asctime()`` and a space with --prefix-output-with-timestamp.
mpirun's own messages (hydra's errors) go straight to the console, unstamped.
mpirun runs in a session of its own: only the launcher gets the terminal's signals, and it
hands each on once. mpirun gets SIGTERM when the launcher dies, so the job ends with it.
"""
import ctypes
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time

__all__ = ["pad_rank", "rank_dir", "capture_patterns", "remove_when_gone", "run_captured",
           "relay_command"]

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


def remove_when_gone(directory):
    """Starts a process that removes ``directory`` (the pipes' directory) when this process
    has gone, however it ends: the relay removes it itself at the job's end, but nothing of
    a process runs after a SIGKILL (the OOM killer, ``kill -9``), and the directory was left
    in /tmp, one per killed job. The pipes cannot go sooner: hydra opens a rank's pipe
    (-outfile-pattern, -errfile-pattern) at that rank's first output on the stream, any
    time up to the job's end, and never when the rank writes nothing there.

    The process (``/bin/sh``, about 1 MB; no child of this one, so nobody's zombie) waits
    in a session of its own, so the terminal's signals (Ctrl-C, hang-up) do not end it
    early, on the read end of a pipe whose only write end is the returned descriptor: it
    removes the directory when the read ends, that is when every holder of the descriptor
    has closed it or exited. The descriptor is not inheritable: the launcher makes it so
    just before it execs the relay, which holds it to its end (its children do not get it:
    subprocess closes their descriptors).

    Returns the descriptor, or None when the process cannot be started (the directory is
    then removed only by the relay's own end)."""
    rfd, wfd = os.pipe()
    try:
        # The outer shell starts the waiting one in the background and exits; a background
        # job's stdin is /dev/null, so the pipe is read as descriptor 3.
        subprocess.run(["/bin/sh", "-c", 'exec 3<&0; { read -r _ <&3; rm -rf -- "$1"; } &',
                        "mxhorovodrun-cleanup", directory],
                       stdin=rfd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       cwd="/", start_new_session=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        os.close(wfd)
        return None
    finally:
        os.close(rfd)
    return wfd


# An unfinished line (a prompt: input(), pdb's "(Pdb) "; a progress bar between two of its
# updates) is shown once its rank has written nothing more for this long, or has this much
# of it: hydra's -l showed it at once, and the relay held it until its newline (the user
# typed into pdb without seeing its prompt). A print under PYTHONUNBUFFERED=1 is several
# writes in a row, far closer together than this, so its line still comes out whole.
PARTIAL_AFTER = 0.5
PARTIAL_MAX = 1 << 20
# What ends a line: "\n", "\r\n", and "\r" alone: a progress bar (tqdm) rewrites its line
# after a "\r" and writes "\n" only at its very end; each of its states is a line of its own
# ("[0] 40%|####  |\r"), so the bar moves on the console as it did under mpirun -l.
_EOL = re.compile(rb"\r\n|\n|\r")


def _write_all(console, data):
    """Writes ``data`` to the console file, waiting while it is full. mpirun (and its
    proxy) inherit the console and share its open file: hydra makes it non-blocking, and
    the launcher's buffered writes then lost whole lines, silently, whenever the console's
    reader was slower than the ranks (a pipe into a log processor, a slow terminal)."""
    try:
        fd = console.fileno()
    except (AttributeError, ValueError, OSError):  # not a file of its own (a test's BytesIO)
        console.write(data)
        console.flush()
        return
    view = memoryview(data)
    poller = None
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            if poller is None:
                poller = select.poll()
                poller.register(fd, select.POLLOUT)
            poller.poll(1000)


class _Console:
    """The state of one console file, shared by the sinks that write to it (stdout and
    stderr on one terminal): its lock, and whose line is left unfinished on it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.open = None  # (rank, stream) whose unfinished line ends the console's text
        # ... and it ends in a blank, like a prompt (input()'s, pdb's "(Pdb) "): the
        # terminal's echo of the user's answer will have ended that line; what the rank
        # writes next is tagged again, as a line of its own.
        self.prompt = False


class _Sink:
    """Where one stream of the ranks goes: the console (shared, one lock) and the files."""

    def __init__(self, console, timestamps, name="stdout", state=None):
        self.console = console
        self.timestamps = timestamps
        self.name = name
        self.state = state or _Console()

    def write(self, rank, data, file, started=False, complete=True):
        """The next bytes of ``rank``'s stream: a line's end (``complete``: ``data`` ends
        with its "\n", "\r\n" or "\r") or a part of a line; ``started``: the line's
        beginning was written before. The console gets each line after ``[rank] ``; a part
        continues on the console only while no other line came in between (else it is
        tagged again, on a line of its own). The file gets the bytes as written."""
        stamp = (time.asctime() + " ").encode() if self.timestamps else b""
        state = self.state
        with state.lock:
            if self.console is not None:
                key = (rank, self.name)
                if started and state.open == key and not state.prompt:
                    text = data
                elif started and not data.strip(b"\r\n"):
                    text = b""  # the bare end of a line that another's line ended
                elif data == b"\r":
                    text = b""  # a progress bar's first "\r": nothing to show
                elif started and state.open == key:
                    # After a prompt the terminal's echo of the answer ended the line.
                    text = stamp + b"[%d] " % rank + data
                else:
                    text = (b"\n" if state.open is not None else b"") + stamp + \
                        b"[%d] " % rank + data
                if text:
                    state.open = None if complete else key
                    state.prompt = not complete and data.endswith((b" ", b"\t"))
                    try:
                        _write_all(self.console, text)
                    except OSError as e:
                        self._console_gone(e)
        if file is not None:
            file.write(data if started else stamp + data)
            file.flush()

    def end(self, rank):
        """``rank``'s stream has ended: its unfinished line gets a newline on the console,
        so that the next line starts on a line of its own (the file does not)."""
        state = self.state
        with state.lock:
            if state.open == (rank, self.name):
                state.open = None
                if self.console is not None:
                    try:
                        _write_all(self.console, b"\n")
                    except OSError as e:
                        self._console_gone(e)

    def _console_gone(self, error=None):
        # The console's reader went away ("mxhorovodrun ... | head") or its terminal hung
        # up. The reader thread used to die of it (a BrokenPipeError traceback): the rank's
        # pipe closed, the rest of its output lost, --output-filename's files cut short.
        # Now only the console is dropped and relaying to the files goes on; the console's
        # descriptor gets /dev/null, so that the flush at exit has nothing to fail on
        # (Python's recipe for BrokenPipeError).
        # Anything but a reader gone (a full disk, /dev/full) is said once, on stderr:
        # the output was dropped without a word.
        console, self.console = self.console, None
        if error is not None and not isinstance(error, BrokenPipeError):
            try:
                os.write(2, b"mxhorovodrun: cannot write the ranks' %s to the console (%s); "
                         b"dropping it from here on\n"
                         % (self.name.encode(), str(error.strerror or error).encode()))
            except OSError:
                pass
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, console.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass  # not a file of its own (a test's BytesIO): dropping it is enough


def _sinks(console, timestamps):
    """The (stdout, stderr) sinks; one _Console for both when they write to the same file
    (a terminal, 2>&1): a line of one stream then ends the other's unfinished line."""
    def ident(f):
        try:
            st = os.fstat(f.fileno())
            return (st.st_dev, st.st_ino, st.st_rdev)
        except (OSError, ValueError, AttributeError):
            return id(f)
    out, err = console
    shared = _Console() if ident(out) == ident(err) else None
    return [_Sink(f, timestamps, name, shared) for f, name in zip(console, _STREAMS)]


def _read(fd, rank, sink, file, partial_after=None):
    """Relays one rank's stream until its pipe ends; closes the pipe and the file."""
    partial_after = PARTIAL_AFTER if partial_after is None else partial_after
    pending = []  # pieces of the unfinished line: joined once it ends (a long line is
    size = 0      # read in many chunks; re-joining it at every chunk was quadratic)
    started = False  # a part of the unfinished line was relayed already

    def flush(complete):
        nonlocal pending, size, started
        sink.write(rank, b"".join(pending), file, started, complete)
        pending, size, started = [], 0, not complete

    poller = select.poll()  # not select(): a descriptor above 1023 (many ranks) fails it
    poller.register(fd, select.POLLIN)
    try:
        while True:
            if pending and not poller.poll(partial_after * 1000):
                # A prompt, or a pause in the middle of a line; but a "\r" at its end ended
                # it (tqdm's "\r<blanks>\r" when it closes, then a print of the same
                # stream): only a "\n" right after it could have made it a "\r\n".
                flush(pending[-1].endswith(b"\r"))
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            if pending and pending[-1].endswith(b"\r") and not chunk.startswith(b"\n"):
                flush(True)  # the "\r" that ended the last chunk ended a line
            if b"\r" not in chunk and b"\n" in chunk:  # the common case, at C speed
                *lines, rest = chunk.split(b"\n")
                pending.append(lines[0])
                lines[0] = b"".join(pending)
                for text in lines:
                    sink.write(rank, text + b"\n", file, started)
                    started = False
                pending, size = ([rest], len(rest)) if rest else ([], 0)
                continue
            begin = 0
            for m in _EOL.finditer(chunk):
                if m.end() == len(chunk) and chunk.endswith(b"\r"):
                    break  # "\r", or half of "\r\n": the next chunk tells
                pending.append(chunk[begin:m.end()])
                flush(True)
                begin = m.end()
            if begin < len(chunk):
                pending.append(chunk[begin:])
                size += len(chunk) - begin
                if size >= PARTIAL_MAX:
                    flush(False)
        if pending:
            flush(False)
        sink.end(rank)
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
    session of its own and forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to it, except those
    this process ignores (``nohup``'s SIGHUP). Returns mpirun's
    exit status (128 + N when killed by signal N, or when it exits 0 after more than one
    forwarded signal, the last N). ``console``: (stdout, stderr) binary files, default this process's.

    Raises:
        OSError: a directory or file of ``output_filename`` cannot be made, or mpirun cannot
            be started.
    """
    console = console or (sys.stdout.buffer, sys.stderr.buffer)
    for c in console:
        c.flush()  # the relay writes past their buffers (_write_all)
    sinks = _sinks(console, timestamps)
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
                if signal.getsignal(signum) == signal.SIG_IGN:
                    continue  # nohup's SIGHUP, a background job's SIGINT: ignored, as asked
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


def relay_command(python, argv, np, capture_dir, output_filename=None, timestamps=False):
    """The command line that runs :func:`run_captured` with these arguments in a Python of
    its own, with mpirun's environment as its own: this file by path, under ``-I`` (no
    PYTHON* variables, no user site, not this directory on sys.path), which imports the
    standard library only. mxhorovodrun execs it: the process that lives as long as the job
    then holds none of the ~220 MB that importing the mxhorovod package (and MXNet) costs,
    as mpirun itself held none when the launcher became it."""
    spec = {"argv": list(argv), "np": np, "capture_dir": capture_dir,
            "output_filename": output_filename, "timestamps": bool(timestamps)}
    return [python, "-I", os.path.abspath(__file__), json.dumps(spec)]


def _main(args):
    spec = json.loads(args[0])
    try:
        return run_captured(spec["argv"], dict(os.environ), spec["np"], spec["capture_dir"],
                            output_filename=spec["output_filename"],
                            timestamps=spec["timestamps"])
    except OSError as e:
        sys.stderr.write("mxhorovodrun: error: %s\n" % e)
        return 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
