"""mxhorovod: distributed training for Apache MXNet by ring allreduce, with Horovod's API.

    import mxhorovod as hvd
    hvd.init()
    ...
    mpirun -np 4 python train.py
"""
# The extension names libmxnet and libmpi by SONAME only: load the user's first, then the
# extension itself, with an error that says what to do (mxhorovod/common/binding.py).
from mxhorovod.common import binding as _binding
_binding.load_extension()

from mxhorovod.collectives.join import join
from mxhorovod.collectives.objects import allgather_object, broadcast_object, broadcast_parameters
from mxhorovod.collectives.ops import (Adasum, Average, Max, Min, Product, Sum, allgather,
                                       allreduce, allreduce_, alltoall, broadcast, broadcast_,
                                       grouped_allgather, grouped_allreduce,
                                       grouped_allreduce_, grouped_reducescatter, reducescatter)
from mxhorovod.common.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                                     gloo_built, gloo_enabled, init, is_homogeneous,
                                     is_initialized, local_rank, local_size, mpi_built,
                                     mpi_enabled, mpi_threads_supported, nccl_built, rank,
                                     rocm_built, shutdown, size, start_timeline, stop_timeline)
from mxhorovod.common.errors import InvalidArgumentError
from mxhorovod.common.process_sets import (ProcessSet, add_process_set, global_process_set,
                                           remove_process_set)
from mxhorovod.training.compression import Compression
from mxhorovod.training.metric import DistributedMetric
from mxhorovod.training.optimizer import DistributedOptimizer, split_list
from mxhorovod.training.optimizer_state import broadcast_optimizer_state
from mxhorovod.training.sampler import DistributedSampler
from mxhorovod.training.sync_batch_norm import SyncBatchNorm
from mxhorovod.training.trainer import DistributedTrainer
from mxhorovod.training import patches as _patches
# Horovod's module paths (horovod.mxnet.mpi_ops, .functions, .compression), the paths that
# pickles name (optimizer, process_sets) and 0.1.0's errors: thin faces, kept as attributes
# too (docs/design.md says why each). hvd.elastic is the elastic API.
from mxhorovod import (compression, elastic, errors, functions, mpi_ops,  # noqa: F401,E402
                       optimizer, process_sets)

# Every patch of an MXNet class, once: kvstore 'horovod' (mx.kv.create('horovod') and the
# string in gluon.Trainer), the cross-rank agreement of gluon.Trainer and Module.update,
# and Trainer.load_states keeping the reduction. docs/design.md lists them.
_patches.install()

__version__ = "0.1.0"

# The public API: horovod.mxnet's names (tests/parity/test_api_parity.py), then ours. The API
# reference (docs/api.md) documents exactly these (tests/docs/test_docs.py).
__all__ = [
    # start, stop, topology
    "init", "shutdown", "is_initialized", "size", "local_size", "cross_size", "rank",
    "local_rank", "cross_rank", "is_homogeneous",
    # build introspection
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    # collectives and their reduction ops
    "allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "broadcast",
    "broadcast_", "allgather", "grouped_allgather", "alltoall", "reducescatter",
    "grouped_reducescatter", "Average", "Sum", "Adasum", "Min", "Max", "Product",
    # process sets
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    # training
    "DistributedOptimizer", "DistributedTrainer", "broadcast_parameters",
    "broadcast_optimizer_state", "broadcast_object",
    "allgather_object", "Compression", "split_list",
    # timeline
    "start_timeline", "stop_timeline",
    # ours
    "InvalidArgumentError", "SyncBatchNorm", "DistributedMetric", "join",
    "DistributedSampler",
]
