"""mxhorovod's stand-in for the package ``horovod``: ``horovod.mxnet`` is mxhorovod's API.

Found first only where asked for: ``mxhorovodrun --horovod-alias`` (or this folder's parent
first on PYTHONPATH by hand; docs/running.md). A real Horovod installed behind it on
sys.path is not hidden: its folders follow this one on ``__path__``, so ``horovod.torch``,
``horovod.runner`` and every other subpackage but ``horovod.mxnet`` are its own. Its
``__init__`` does not run: ``__version__`` is read from it, and ``horovod.run`` is
``horovod.runner.run``, imported when first asked for.

What it is, for a script or a person to check:

- ``horovod.mxhorovod_alias``: True (a real Horovod has no such name);
- ``horovod.real_horovod``: the real Horovod's folder, or None when there is none;
- ``horovod.__version__``: the real Horovod's version; without one, ``"0.28.1"``, the
  Horovod whose horovod.mxnet API mxhorovod follows (scripts compare it to pick an API);
  ``horovod.mxnet.__version__`` is mxhorovod's.

Standard library only: ``import horovod.torch`` imports neither mxhorovod nor MXNet.
"""
import ast
import importlib.machinery
import os
import sys

HOROVOD_API_VERSION = "0.28.1"

mxhorovod_alias = True


def _alias_root(entry):
    """Whether the sys.path entry ``entry`` is an alias folder: this one, or another
    mxhorovod's (a checkout's and an installed copy's both on the path)."""
    if not isinstance(entry, str):
        return False
    folder = os.path.realpath(entry or os.curdir)
    return (os.path.basename(folder) == "horovod_alias"
            and os.path.basename(os.path.dirname(folder)) == "mxhorovod")


def _real_spec():
    """The spec of the package ``horovod`` that Python would import without the alias
    folders on sys.path, or None."""
    path = [p for p in sys.path if not _alias_root(p)]
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            if finder is importlib.machinery.PathFinder:
                spec = find("horovod", path)
            else:  # an editable install's finder, and the like
                spec = find("horovod", None)
        except (ImportError, AttributeError, TypeError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        if any(_alias_root(os.path.dirname(p)) for p in spec.submodule_search_locations):
            continue
        return spec
    return None


def _version_of(spec):
    """``__version__ = "..."`` of the real package's ``__init__.py`` (read, not run), else
    its distribution's version, else None."""
    try:
        with open(spec.origin, encoding="utf-8") as f:
            tree = ast.parse(f.read(), spec.origin)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
                return str(ast.literal_eval(node.value))
    except (OSError, TypeError, ValueError, SyntaxError):  # no file: a namespace package
        pass
    try:
        from importlib import metadata
        return metadata.version("horovod")
    except (ImportError, OSError, ValueError):  # PackageNotFoundError is an ImportError
        return None


_REAL = _real_spec()
real_horovod = None
__version__ = HOROVOD_API_VERSION
if _REAL is not None:
    __path__.extend(_REAL.submodule_search_locations)
    real_horovod = list(_REAL.submodule_search_locations)[0]
    __version__ = _version_of(_REAL) or __version__


def __getattr__(name):
    """``horovod.run``: the real Horovod's ``horovod.runner.run``, when one is installed."""
    if name == "run" and real_horovod is not None:
        from horovod.runner import run
        globals()["run"] = run
        return run
    raise AttributeError("module 'horovod' has no attribute %r (this horovod is mxhorovod's "
                         "alias, whose horovod.mxnet is mxhorovod; other Horovod: %s)"
                         % (name, real_horovod or "none installed"))
