"""A rank that fails ends the whole job, and says which rank it was.

On jobs of 2+ ranks, ``init()`` installs:

- an excepthook: an unhandled exception on the main thread logs ``... rank 1 (pid 4242 on
  host) failed with an unhandled ValueError; ending the job (MPI_Abort)`` and the
  traceback, then ``MPI_Abort`` ends every rank with a non-zero exit code; in a child the
  rank forked, only the traceback, and only that child ends;
- fatal-signal reports (the core's job_abort.h): SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT
  and an unhandled SIGTERM print such a line before the process dies of the signal (in a
  forked child: a line naming it so, and nothing for SIGTERM).

From the import on, until ``init()`` completes, the same excepthook ends the job when
another library started MPI (mpi4py) in a job of 2+ ranks (``... before hvd.init()
completed; ending the job (MPI_Abort)``), also when ``init()`` raised; else it only prints.
To handle failures yourself, restore ``sys.excepthook`` after ``init()``.
``sys.exit(n)`` ends only this rank; the peers' pending operations fail naming it.
SIGKILL cannot be caught: run the ranks under ``mxhorovod/rank_guard.py`` to have it named.
"""
import os
import socket
import sys

import mxhorovod._core as _core
from mxhorovod.common.log import get_logger

__all__ = ["install"]

_state = {"installed": False, "rank": None, "previous": None, "pid": None}


def note_to_guard(note):
    """Tells mxhorovod/rank_guard.py, when it started this rank, how the rank stands: b'I'
    MPI runs (init), b'E' finalized by the exit handler, b'A' the excepthook's MPI_Abort
    follows; written over byte 0 of the guard's file, so only the last one stays. Only from
    the process that called init() (a forked child shares the descriptor)."""
    fields = os.environ.get("MXHOROVOD_GUARD_FD", "").split(":")
    if len(fields) != 3 or not all(f.isdigit() for f in fields) or \
            (note != b"I" and _guard["pid"] != os.getpid()):
        return
    fd, dev, ino = map(int, fields)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) == (dev, ino):  # not a file the script opened there
            os.pwrite(fd, note, 0)
    except OSError:  # closed by the script: the guard then says nothing
        return
    if note == b"I":
        _guard["pid"] = os.getpid()


_guard = {"pid": None}


def guard_word():
    """Byte 1 of the rank guard's notes file (written by the guard under the elastic
    driver: b'L' a SIGTERM was taken as this host's notice, b'S' it was not), b'' when
    unwritten or no guard started this process."""
    fields = os.environ.get("MXHOROVOD_GUARD_FD", "").split(":")
    if len(fields) != 3 or not all(f.isdigit() for f in fields):
        return b""
    fd, dev, ino = map(int, fields)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (dev, ino):
            return b""
        return os.pread(fd, 1, 1)
    except OSError:
        return b""


def _excepthook(exc_type, exc, tb):
    previous = _state["previous"] or sys.__excepthook__
    if os.getpid() != _state["pid"]:
        # A child forked after init() (os.fork()) is not the rank: its exception ends that
        # process only, as without mxhorovod (MPI_Abort from it ended the whole job, and
        # the log line named the child's pid as the rank's).
        previous(exc_type, exc, tb)
        return
    _end_job(previous, (exc_type, exc, tb), _state["rank"], "", guard=True)


def _end_job(previous, exc_info, rank, when, guard):
    """Logs that ``rank`` failed (``when``: '' or ' before hvd.init() completed'), lets ``previous``
    print the traceback, flushes, and ends the job (MPI_Abort)."""
    try:
        get_logger().error("rank %s (pid %d on %s) failed with an unhandled %s%s; ending the "
                           "job (MPI_Abort)", rank, os.getpid(), socket.gethostname(),
                           exc_info[0].__name__, when)
    finally:
        previous(*exc_info)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed or replaced stream must not stop the abort
                pass
        if guard:
            note_to_guard(b"A")
        _core.abort_job(1)


def _before_init_excepthook(exc_type, exc, tb):
    previous = _early["previous"] or sys.__excepthook__
    # Not in a child forked after the import (a DataLoader worker): it is not the rank.
    running, rank, size = _core.mpi_world() if os.getpid() == _early["pid"] else (False, -1, 0)
    if not running or size < 2:
        previous(exc_type, exc, tb)
        return
    _end_job(previous, (exc_type, exc, tb), rank, " before hvd.init() completed", guard=False)


_early = {"pid": None, "previous": None}


def install_before_init():
    """Installs the excepthook for failures before ``init()`` (see the module's docstring);
    called at the import of mxhorovod. ``install`` replaces it."""
    if _early["pid"] is None:
        _early["pid"] = os.getpid()
        _early["previous"] = sys.excepthook
        sys.excepthook = _before_init_excepthook


def install(rank, size):
    """Installs the excepthook and the signal reports for ``rank`` (jobs of 2+ ranks).

    Called by ``init()``; again after a re-init only updates the rank."""
    if sys.excepthook is _before_init_excepthook:  # init's own, chained to the script's
        sys.excepthook = _early["previous"] or sys.__excepthook__
    if size < 2:
        return
    _state["rank"] = rank
    _state["pid"] = os.getpid()
    _core.install_signal_reports(rank)
    if not _state["installed"]:
        _state["previous"] = sys.excepthook
        sys.excepthook = _excepthook
        _state["installed"] = True
