"""The launcher's former home: the package :mod:`mxhorovodrun`, under its old names.

``mxhorovod.runner.launch`` (and every other module of the launcher) is the very module
``mxhorovodrun.launch``, so an import or a monkeypatch through either name reaches the
same code. Importing through this name imports mxhorovod first, and with it MXNet; the
launcher itself (the ``mxhorovodrun`` console script, ``python -m mxhorovodrun``) does not.
"""
import importlib
import pkgutil
import sys

import mxhorovodrun

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
