"""mxhorovod: distributed training for Apache MXNet by ring allreduce, with Horovod's API.

    import mxhorovod as hvd
    hvd.init()
    ...
    mpirun -np 4 python train.py
"""
# --- load the user's libmxnet and libmpi first: the extension names them by SONAME only
# (mxhorovod/binding.py); then the extension itself, with an error that says what to do ---
from mxhorovod import binding as _binding
_binding.prepare()
try:
    from mxhorovod import _core  # noqa: F401
except ImportError as _e:
    raise ImportError("mxhorovod's extension (mxhorovod._core) failed to load: %s. Check the "
                      "install with `mxhorovodrun --check-build`; rebuild with "
                      "`pip install --force-reinstall --no-cache-dir mxhorovod` (or your "
                      "wheel or checkout)." % _e) from _e

from mxhorovod.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                              gloo_built, gloo_enabled, init, is_homogeneous, is_initialized,
                              local_rank, local_size, mpi_built, mpi_enabled,
                              mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size,
                              start_timeline, stop_timeline)
from mxhorovod.mpi_ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allreduce,
                               allreduce_, alltoall, broadcast, broadcast_, grouped_allgather,
                               grouped_allreduce, grouped_allreduce_, grouped_reducescatter,
                               reducescatter)
from mxhorovod.process_sets import (ProcessSet, add_process_set, global_process_set,
                                    remove_process_set)
from mxhorovod.errors import InvalidArgumentError

__version__ = "0.1.0"

# The public API: horovod.mxnet's names (tests/test_api_parity.py), then ours. The API
# reference (docs/api.md) documents exactly these (tests/test_docs.py).
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
    "DistributedOptimizer", "DistributedTrainer", "broadcast_parameters", "broadcast_object",
    "allgather_object", "Compression", "split_list",
    # timeline
    "start_timeline", "stop_timeline",
    # ours
    "InvalidArgumentError",
]

# --- training API (optimizer, trainer, functions, compression) ---
from mxhorovod.compression import Compression
from mxhorovod.functions import allgather_object, broadcast_object, broadcast_parameters
from mxhorovod.optimizer import DistributedOptimizer, split_list
from mxhorovod.trainer import DistributedTrainer
# --- end of training API ---

# --- elastic training: hvd.elastic.run, GluonState, ... (mxhorovod/elastic/) ---
from mxhorovod import elastic  # noqa: F401

# --- kvstore 'horovod': importing registers mx.kv.create('horovod') with MXNet ---
from mxhorovod import kvstore  # noqa: F401

# --- gluon.Trainer over kvstore 'horovod' or with a DistributedOptimizer: ranks agree on
# fresh gradients with ignore_stale_grad=True, and on AMP overflow (mxhorovod/agreement.py) ---
from mxhorovod.agreement import install_trainer_agreement as _install_trainer_agreement
_install_trainer_agreement()

# --- gluon.Trainer.load_states keeps the Trainer's reduction: the file gives the optimizer and
# its states, not whether a DistributedOptimizer wraps it (mxhorovod/load_states.py) ---
from mxhorovod.load_states import install_load_states as _install_load_states
_install_load_states()

# --- Module.update with a DistributedOptimizer: the ranks reduce the same parameters
# (mxhorovod/layout_check.py) ---
from mxhorovod.layout_check import install_module_layout_check as _install_module_layout_check
_install_module_layout_check()
