"""``mxhorovodrun --horovod-alias``: a script written for Horovod (``import horovod.mxnet as
hvd``) runs on mxhorovod unchanged.

The ranks get the folder mxhorovod/horovod_alias first on PYTHONPATH. It holds a package
named ``horovod`` whose ``horovod.mxnet`` is mxhorovod's API, and whose other subpackages
(horovod.torch, horovod.runner, ...) are a real Horovod's when one is installed
(mxhorovod/horovod_alias/horovod/__init__.py says how). Nothing is installed: without the
flag, ``import horovod`` finds what it found before. A Python run with ``-I`` or ``-E``
ignores PYTHONPATH, and so the alias.

For plain mpirun (hydra hands PYTHONPATH to every rank)::

    PYTHONPATH=$(python -m mxhorovodrun.horovod_alias)${PYTHONPATH:+:$PYTHONPATH} \\
        mpirun -np 2 python train.py

``python -m mxhorovodrun.horovod_alias`` prints the folder; standard library only.
"""
import os
import sys

from mxhorovodrun.guard import package_places
from mxhorovodrun.settings import env_switch

__all__ = ["ALIAS_VARIABLE", "alias_setting", "alias_path", "alias_pythonpath"]

ALIAS_VARIABLE = "MXHOROVOD_HOROVOD_ALIAS"

def alias_setting(environ):
    """Whether MXHOROVOD_HOROVOD_ALIAS in ``environ`` asks for the alias: False when unset
    or empty, or 0/false/no/off; True for 1/true/yes/on (any case).

    Raises:
        ValueError: any other value (the message names the variable and its value).
    """
    return env_switch(environ, ALIAS_VARIABLE, False,
                      "1 (horovod.mxnet is mxhorovod in the ranks) or 0 (the default: no alias)")


def alias_path():
    """Absolute path of the folder mxhorovod/horovod_alias (the one that holds the package
    ``horovod``), in the first of the places where mxhorovod's files are (see
    :func:`mxhorovodrun.guard.package_places`; found without importing mxhorovod).

    Raises:
        FileNotFoundError: in none of them (the message names them).
    """
    places = package_places()
    for place in places:
        path = os.path.join(place, "horovod_alias")
        if os.path.isfile(os.path.join(path, "horovod", "mxnet", "__init__.py")):
            return path
    raise FileNotFoundError(
        "--horovod-alias: the alias package (mxhorovod/horovod_alias/horovod) is not in %s: "
        "reinstall mxhorovod, or write import mxhorovod as hvd in the script"
        % " nor ".join(places))


def alias_pythonpath(current, path=None):
    """PYTHONPATH with the alias folder ``path`` (default :func:`alias_path`) first, once:
    ``current`` (the PYTHONPATH so far, None or empty for none) keeps its other entries in
    their order, empty ones too (Python reads those as the current folder)."""
    path = path or alias_path()
    rest = [p for p in current.split(os.pathsep) if p != path] if current else []
    return os.pathsep.join([path] + rest)


if __name__ == "__main__":
    try:
        print(alias_path())
    except FileNotFoundError as e:
        sys.exit("mxhorovodrun.horovod_alias: error: %s" % e)
