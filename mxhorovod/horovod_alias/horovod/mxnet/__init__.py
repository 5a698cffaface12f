"""``horovod.mxnet`` under mxhorovod's alias (``mxhorovodrun --horovod-alias``): mxhorovod.

Every name is the very object ``mxhorovod`` has: the names of its ``__all__``,
``__version__`` (mxhorovod's) and ``elastic``. Horovod's module paths
``horovod.mxnet.mpi_ops``, ``horovod.mxnet.functions`` and ``horovod.mxnet.compression``
(and ``horovod.mxnet.elastic``) are the very modules ``mxhorovod.mpi_ops``, ... So what a
script saves names mxhorovod's paths, as with ``import mxhorovod as hvd``.
"""
import sys

import mxhorovod

__all__ = mxhorovod.__all__
__version__ = mxhorovod.__version__
globals().update((name, getattr(mxhorovod, name)) for name in __all__)
# Horovod's module paths: `import horovod.mxnet.mpi_ops` finds them in sys.modules before
# it would search a folder.
for _name in ("mpi_ops", "functions", "compression", "elastic"):
    globals()[_name] = sys.modules[__name__ + "." + _name] = getattr(mxhorovod, _name)
del _name
