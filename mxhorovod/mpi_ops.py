"""Horovod's path ``horovod.mxnet.mpi_ops``: the collectives, their reduction ops, and the
start, topology and process-set calls (``from mxhorovod.mpi_ops import init, rank``).
A face: the code is in :mod:`mxhorovod.collectives.ops`."""
from mxhorovod.collectives import ops as _ops
from mxhorovod.collectives.ops import *  # noqa: F401,F403
from mxhorovod.common import basics as _basics
from mxhorovod.common import process_sets as _process_sets
from mxhorovod.common.basics import *  # noqa: F401,F403
from mxhorovod.common.errors import InvalidArgumentError  # noqa: F401
from mxhorovod.common.process_sets import *  # noqa: F401,F403

__all__ = _ops.__all__ + _basics.__all__ + _process_sets.__all__ + ["InvalidArgumentError"]
