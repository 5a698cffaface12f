"""The public names of horovod.mxnet 0.28.1 that a script may use (the parity tests check
them here, the docs tests that the API page documents them)."""

# horovod/mxnet/__init__.py (0.28.1): every public name a script may use.
HOROVOD_MXNET_NAMES = """
Compression allgather_object broadcast_object allgather grouped_allgather allreduce allreduce_
grouped_allreduce grouped_allreduce_ alltoall broadcast broadcast_ reducescatter
grouped_reducescatter init shutdown is_initialized size local_size cross_size rank local_rank
cross_rank mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built nccl_built
ddl_built ccl_built cuda_built rocm_built ProcessSet global_process_set add_process_set
remove_process_set Average Sum Adasum Min Max Product DistributedOptimizer DistributedTrainer
broadcast_parameters split_list is_homogeneous start_timeline stop_timeline
""".split()

# horovod/mxnet/mpi_ops.py (0.28.1): its public names a script may import from there.
HOROVOD_MPI_OPS_NAMES = """
Adasum Average Max Min Product Sum ProcessSet add_process_set allgather allreduce allreduce_
alltoall broadcast broadcast_ ccl_built cross_rank cross_size cuda_built ddl_built
global_process_set gloo_built gloo_enabled grouped_allgather grouped_allreduce
grouped_allreduce_ grouped_reducescatter init is_initialized local_rank local_size mpi_built
mpi_enabled mpi_threads_supported nccl_built rank reducescatter remove_process_set rocm_built
shutdown size start_timeline stop_timeline
""".split()
