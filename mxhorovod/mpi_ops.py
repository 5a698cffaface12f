"""Horovod's path ``horovod.mxnet.mpi_ops``: the collectives, their reduction ops, and the
start, topology and process-set calls (``from mxhorovod.mpi_ops import init, rank``).
A face: the code is in :mod:`mxhorovod.collectives.ops`."""
from mxhorovod.collectives.ops import *  # noqa: F401,F403
from mxhorovod.collectives.ops import __all__ as _ops_all
from mxhorovod.common.basics import (  # noqa: F401
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
    is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
    nccl_built, rank, rocm_built, shutdown, size, start_timeline, stop_timeline)
from mxhorovod.common.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, remove_process_set)

__all__ = list(_ops_all)
