"""The folder that ``mxhorovodrun --horovod-alias`` puts first on the ranks' PYTHONPATH.

It holds a package named ``horovod`` (horovod/__init__.py, horovod/mxnet/__init__.py) in
which ``import horovod.mxnet as hvd`` gives mxhorovod's API, so a script written for
Horovod runs unchanged: docs/running.md, "Scripts written for Horovod". On sys.path it is a
root, not a package: its modules are named ``horovod`` and ``horovod.mxnet``. This file
only makes the folder part of the installed package; nothing imports
``mxhorovod.horovod_alias``. ``python -m mxhorovodrun.horovod_alias`` prints the folder.
"""
