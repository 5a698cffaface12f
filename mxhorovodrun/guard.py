"""Every rank of mxhorovodrun under mxhorovod/rank_guard.py, unless turned off.

The rank's command becomes ``PYTHON -I -S /path/to/mxhorovod/rank_guard.py COMMAND...``:
the launcher's own Python, and the guard of the mxhorovod package that this Python would
import, found without importing it.
``-I`` keeps the script's directory, PYTHON* variables and the user's site off the guard's
sys.path; ``-S`` skips ``site`` and its .pth files, which slow every rank's start.
The rank gets the environment unchanged; any command works behind the guard.
On other hosts (-H, --hostfile) both paths must exist, as the ranks' own paths must.
``--no-rank-guard``, or ``MXHOROVOD_RANK_GUARD=0``, runs the command as given.
rank_guard.py says what the guard does.

OMP_NUM_THREADS that the launcher chose (the user set none) comes with the marker
MXHOROVOD_OMP_NUM_THREADS_AUTO=1: the guard on each host then sets it to that host's CPUs
divided by its ranks, as the launcher cannot know other hosts' cores. A user's own
OMP_NUM_THREADS has no marker and is never touched.
"""
import importlib.util
import os

from mxhorovodrun.settings import env_switch

__all__ = ["GUARD_VARIABLE", "OMP_MARKER", "package_places", "guard_path",
           "rank_guard_setting", "guarded_command"]

GUARD_VARIABLE = "MXHOROVOD_RANK_GUARD"
# Set to 1 beside an OMP_NUM_THREADS that the launcher chose; rank_guard.py reads the same
# name (it imports nothing from here).
OMP_MARKER = "MXHOROVOD_OMP_NUM_THREADS_AUTO"

def rank_guard_setting(environ):
    """Whether MXHOROVOD_RANK_GUARD in ``environ`` asks for the guard: True when unset or
    empty, or 1/true/yes/on; False for 0/false/no/off (any case).

    Raises:
        ValueError: any other value (the message names the variable and its value).
    """
    return env_switch(environ, GUARD_VARIABLE, True,
                      "1 (the default: each rank under the rank guard) or 0 (none)")


def package_places():
    """Folders where mxhorovod's files are looked for, in order: the mxhorovod package that
    this Python would import (found, not imported: importing it imports MXNet), then the
    one beside this package (a checkout)."""
    places = []
    try:
        spec = importlib.util.find_spec("mxhorovod")
    except (ImportError, ValueError):  # ValueError: imported, without a __spec__
        spec = None
    if spec is not None and spec.origin:
        places.append(os.path.dirname(os.path.abspath(spec.origin)))
    places.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "mxhorovod"))
    return places


def guard_path():
    """Absolute path of mxhorovod/rank_guard.py, in the first of :func:`package_places`
    that has it.

    Raises:
        FileNotFoundError: neither exists (the message says how to run without the guard).
    """
    places = package_places()
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
