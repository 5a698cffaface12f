"""The 'mxhorovod' logger: rank-prefixed lines on stderr, quiet by default.

Lines look like the core's (C++) lines, so both read as one log::

    [1]<warning> 2024-05-01 12:00:03.125 mxhorovod: message

HOROVOD_LOG_LEVEL sets the level (trace, debug, info, warning, error, fatal; default
warning); HOROVOD_LOG_HIDE_TIME=1 drops the timestamp. Both are read at import and again
at ``init()``; with HOROVOD_LOG_LEVEL unset, a level the script set on the logger is kept.
The rank is this process's rank in the job once ``init()`` has run (kept after
``shutdown()``), before that the launcher's (PMI_RANK, OMPI_COMM_WORLD_RANK, HOROVOD_RANK),
else ``?``. The logger does not propagate to the root logger; configure it with
``logging.getLogger("mxhorovod")`` like any other.
"""
import logging
import os
import sys

__all__ = ["LOGGER_NAME", "TRACE", "get_logger", "configure", "level_from_env"]

LOGGER_NAME = "mxhorovod"
TRACE = 5  # below DEBUG, Horovod's "trace"
logging.addLevelName(TRACE, "TRACE")

_LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO,
           "warning": logging.WARNING, "error": logging.ERROR, "fatal": logging.CRITICAL}
_NAMES = {v: k for k, v in _LEVELS.items()}
_LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "HOROVOD_RANK")

_known_rank = None


def level_from_env():
    """The logging level named by HOROVOD_LOG_LEVEL (warning when unset or empty).

    Raises:
        ValueError: a value other than trace, debug, info, warning, error or fatal.
    """
    value = os.environ.get("HOROVOD_LOG_LEVEL", "").strip().lower()
    if not value:
        return logging.WARNING
    if value not in _LEVELS:
        raise ValueError("HOROVOD_LOG_LEVEL=%r is not one of %s"
                         % (os.environ["HOROVOD_LOG_LEVEL"], ", ".join(_LEVELS)))
    return _LEVELS[value]


def set_rank(rank):
    """Remembers this process's rank in the job (called by ``init()``)."""
    global _known_rank
    _known_rank = int(rank)


def _current_rank():
    if _known_rank is not None:
        return str(_known_rank)
    for var in _LAUNCHER_RANK_VARS:
        if os.environ.get(var, "").isdigit():
            return os.environ[var]
    return "?"


class _RankFilter(logging.Filter):
    """Adds the rank and Horovod's lower-case level name to every record."""

    def filter(self, record):
        record.hvd_rank = _current_rank()
        record.hvd_level = _NAMES.get(record.levelno, record.levelname.lower())
        return True


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (test runners replace it)."""

    def __init__(self):
        super().__init__(sys.stderr)

    def emit(self, record):
        self.stream = sys.stderr
        super().emit(record)


def _formatter(hide_time):
    if hide_time:
        return logging.Formatter("[%(hvd_rank)s]<%(hvd_level)s> mxhorovod: %(message)s")
    return logging.Formatter("[%(hvd_rank)s]<%(hvd_level)s> %(asctime)s.%(msecs)03d "
                             "mxhorovod: %(message)s", datefmt="%Y-%m-%d %H:%M:%S")


_handler = _StderrHandler()
_handler.addFilter(_RankFilter())


def configure(strict=False):
    """(Re)reads HOROVOD_LOG_LEVEL and HOROVOD_LOG_HIDE_TIME into the logger.

    With ``strict`` a bad HOROVOD_LOG_LEVEL raises ValueError; otherwise it is ignored
    (warning level), and ``init()`` reports it.
    """
    logger = logging.getLogger(LOGGER_NAME)
    first = _handler not in logger.handlers
    try:
        level = level_from_env()
    except ValueError:
        if strict:
            raise
        level = logging.WARNING
    hide = os.environ.get("HOROVOD_LOG_HIDE_TIME", "").strip().lower() in ("1", "true", "yes", "on")
    _handler.setFormatter(_formatter(hide))
    if first:
        logger.addHandler(_handler)
        logger.propagate = False
    # Without the variable, a level the script set on the logger itself is kept.
    if first or os.environ.get("HOROVOD_LOG_LEVEL", "").strip():
        logger.setLevel(level)
    return logger


def get_logger():
    """The 'mxhorovod' logger (configured on first use)."""
    logger = logging.getLogger(LOGGER_NAME)
    if _handler not in logger.handlers:
        configure()
    return logger
