"""The launcher's former home: the package :mod:`mxhorovodrun`, under its old names.

``mxhorovod.runner.launch`` (and every other module of the launcher) is the very module
``mxhorovodrun.launch``, so an import or a monkeypatch through either name reaches the
same code. Importing through this name imports mxhorovod first, and with it MXNet; the
launcher itself (the ``mxhorovodrun`` console script, ``python -m mxhorovodrun``) does not.
"""
import importlib
import pkgutil
import sys


def _sibling_launcher():
    """mxhorovodrun from the directory beside this package's, for an editable install made
    before the launcher had a package of its own (its import finder knows mxhorovod only):
    the console script of such an install imports this module, and a checkout updated by
    ``git pull`` keeps launching without a reinstall."""
    import importlib.util
    import os
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(here, "mxhorovodrun")
    init = os.path.join(path, "__init__.py")
    if not os.path.isfile(init):
        return None
    spec = importlib.util.spec_from_file_location("mxhorovodrun", init,
                                                  submodule_search_locations=[path])
    module = importlib.util.module_from_spec(spec)
    sys.modules["mxhorovodrun"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["mxhorovodrun"]
        raise
    return module


try:
    import mxhorovodrun
except ModuleNotFoundError as e:
    if e.name != "mxhorovodrun":
        raise
    mxhorovodrun = _sibling_launcher()
    if mxhorovodrun is None:
        raise ImportError(
            "mxhorovod's launcher is the package mxhorovodrun, which is not installed beside "
            "mxhorovod (an install made before it existed): reinstall mxhorovod "
            "(pip install --no-build-isolation -e . in the checkout)") from e

# Every module of the launcher, as it has them (a new one needs no line here).
_MODULES = sorted(m.name for m in pkgutil.iter_modules(mxhorovodrun.__path__)
                  if m.name != "__main__")

for _name in _MODULES:
    _module = importlib.import_module("mxhorovodrun." + _name)
    sys.modules[__name__ + "." + _name] = _module
    globals()[_name] = _module
del _name, _module

main = mxhorovodrun.main
run_commandline = mxhorovodrun.run_commandline

__all__ = ["main", "run_commandline"]
