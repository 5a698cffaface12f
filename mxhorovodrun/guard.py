"""Every rank of mxhorovodrun under mxhorovod/rank_guard.py, unless turned off.

A rank that ends after ``hvd.init()`` without finalizing MPI (``os._exit(0)`` in a script,
a library that calls ``_exit``) makes MPICH's mpirun kill the other ranks by SIGKILL, which
prints nothing, and the job exits 0: a failed job reported as a success. The guard, put in
front of the rank's command, starts the rank as its child and turns that end into exit code
1 and a line naming the rank (``[1]<error> ... mxhorovod: rank 1 (pid 4242 on host) exited
with code 0 while MPI was running in it, without finalizing it ...``); it also names a rank
killed by a signal (SIGKILL included). See rank_guard.py for what it does and what it
passes through unchanged (exit codes, signals, output, descriptors).

The rank's command becomes ``PYTHON -I -S /path/to/mxhorovod/rank_guard.py COMMAND...``:
the launcher's own Python and the guard by absolute path, found as the launcher finds
mxhorovod's version (in the package this Python would import; nothing of it runs here).
The guard imports the standard library only, never MXNet: ``-I`` keeps the script's
directory, PYTHON* variables and the user's site off its sys.path (as for the output
relay), ``-S`` skips ``site`` (the site-packages' .pth files: an editable install's import
hook cost 20-30 ms of every rank's start here). The rank itself gets the environment
unchanged. On other hosts (-H, --hostfile) both paths must exist, as the ranks' own Python
and package paths must. Any command works behind it, not only ``python``.

horovodrun has no such guard; ``--no-rank-guard``, or ``MXHOROVOD_RANK_GUARD=0``, runs the
command as given.
"""
import importlib.util
import os

__all__ = ["GUARD_VARIABLE", "guard_path", "rank_guard_setting", "guarded_command"]

GUARD_VARIABLE = "MXHOROVOD_RANK_GUARD"

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def rank_guard_setting(environ):
    """Whether MXHOROVOD_RANK_GUARD in ``environ`` asks for the guard: True when unset or
    empty, or 1/true/yes/on; False for 0/false/no/off (any case).

    Raises:
        ValueError: any other value (the message names the variable and its value).
    """
    text = environ.get(GUARD_VARIABLE, "").strip().lower()
    if not text or text in _ON:
        return True
    if text in _OFF:
        return False
    raise ValueError("%s=%s: 1 (the default: each rank under the rank guard) or 0 (none)"
                     % (GUARD_VARIABLE, environ[GUARD_VARIABLE]))


def guard_path():
    """Absolute path of mxhorovod/rank_guard.py: in the mxhorovod package that this Python
    would import (found, not imported: importing it imports MXNet), else beside this
    package (a checkout).

    Raises:
        FileNotFoundError: neither exists (the message says how to run without the guard).
    """
    places = []
    try:
        spec = importlib.util.find_spec("mxhorovod")
    except (ImportError, ValueError):  # ValueError: imported, without a __spec__
        spec = None
    if spec is not None and spec.origin:
        places.append(os.path.dirname(os.path.abspath(spec.origin)))
    places.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "mxhorovod"))
    for place in places:
        path = os.path.join(place, "rank_guard.py")
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(
        "the rank guard (mxhorovod/rank_guard.py) is not in %s: reinstall mxhorovod, or run "
        "the ranks without it (--no-rank-guard, or %s=0)" % (" nor ".join(places),
                                                             GUARD_VARIABLE))


def guarded_command(command, python, path=None):
    """``command`` (the rank's argv, a list of str) behind the guard, run by ``python``
    (the path of a Python 3 interpreter, usually the launcher's sys.executable); ``path``:
    the guard's (default :func:`guard_path`, which raises FileNotFoundError)."""
    return [python, "-I", "-S", path or guard_path()] + list(command)
