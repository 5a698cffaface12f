"""Horovod's path ``horovod.mxnet.mpi_ops``: the collectives, their reduction ops, and the
start, topology and process-set calls (``from mxhorovod.mpi_ops import init, rank``).
A face: the code is in :mod:`mxhorovod.collectives.ops`."""
from mxhorovod.collectives.ops import *  # noqa: F401,F403
from mxhorovod.collectives.ops import __all__ as _ops_all
from mxhorovod.common.basics import (  # noqa: F401
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
    is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size, start_timeline,
    stop_timeline)
from mxhorovod.common.errors import InvalidArgumentError  # noqa: F401
from mxhorovod.common.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, remove_process_set)

__all__ = list(_ops_all) + [
    "init", "shutdown", "is_initialized", "size", "local_size", "cross_size", "rank",
    "local_rank", "cross_rank", "is_homogeneous", "mpi_threads_supported", "mpi_enabled",
    "mpi_built", "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built",
    "cuda_built", "rocm_built", "start_timeline", "stop_timeline", "ProcessSet",
    "global_process_set", "add_process_set", "remove_process_set", "InvalidArgumentError"]
