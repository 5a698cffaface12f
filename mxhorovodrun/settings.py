"""The environment mxhorovodrun gives the ranks: HOROVOD_* variables from the flags (names,
units and transformations of horovodrun 0.28.1's config_parser.set_env_from_args),
-x variables, and OMP_NUM_THREADS (by the usable cores of mxhorovodrun.cores)."""

__all__ = ["LOG_LEVELS", "UNUSED_FLAGS", "horovod_env", "omp_threads", "env_switch"]

LOG_LEVELS = ["TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"]

# Flags horovodrun users pass that set a variable this build does not act on; the launcher
# says so instead of letting the user believe they work.
UNUSED_FLAGS = {
    "autotune_bayes_opt_max_samples": "--autotune-bayes-opt-max-samples: mxhorovod's "
                                      "autotuner is a grid search (no effect)",
    "autotune_gaussian_process_noise": "--autotune-gaussian-process-noise: mxhorovod's "
                                       "autotuner is a grid search (no effect)",
    "mpi_threads_disable": "--mpi-threads-disable: no effect: mxhorovod's core calls MPI "
                           "from its background thread (MPI_Init_thread there) and from the "
                           "caller's (MPI_Finalize at exit, MPI_Abort), so it always requests "
                           "MPI_THREAD_MULTIPLE and does not read HOROVOD_MPI_THREADS_DISABLE",
    "num_nccl_streams": "--num-nccl-streams: no effect: mxhorovod has no NCCL (CPU tensors "
                        "only, over MPI)",
    "gloo_timeout_seconds": "--gloo-timeout-seconds: no effect: mxhorovod has no Gloo (MPI only)",
    "hierarchical_allgather": "--hierarchical-allgather: no effect: mxhorovod's allgather is "
                              "flat (--hierarchical-allreduce is the hierarchical operation)",
    "torus_allreduce": "--torus-allreduce: no effect: mxhorovod has no torus allreduce "
                       "(--hierarchical-allreduce is the hierarchical operation)",
}


def _flag(value):
    return "1" if value else "0"


def horovod_env(args):
    """{name: value} of the HOROVOD_* variables that the given flags set (unset flags set
    nothing, so a variable already in the environment keeps its value)."""
    env = {}

    def put(name, value, transform=str):
        if value is not None:
            env[name] = transform(value)

    put("HOROVOD_FUSION_THRESHOLD", args.fusion_threshold_mb, lambda mb: str(mb * 1024 * 1024))
    put("HOROVOD_CYCLE_TIME", args.cycle_time_ms, lambda ms: str(float(ms)))
    put("HOROVOD_CACHE_CAPACITY", args.cache_capacity)
    put("HOROVOD_HIERARCHICAL_ALLREDUCE", args.hierarchical_allreduce, _flag)
    # horovodrun sets these; this build does not act on them (UNUSED_FLAGS warns).
    put("HOROVOD_MPI_THREADS_DISABLE", args.mpi_threads_disable, _flag)
    put("HOROVOD_NUM_NCCL_STREAMS", args.num_nccl_streams)
    put("HOROVOD_THREAD_AFFINITY", args.thread_affinity)
    put("HOROVOD_GLOO_TIMEOUT_SECONDS", args.gloo_timeout_seconds)
    put("HOROVOD_HIERARCHICAL_ALLGATHER", args.hierarchical_allgather, _flag)
    put("HOROVOD_TORUS_ALLREDUCE", args.torus_allreduce, _flag)
    if args.autotune:
        put("HOROVOD_AUTOTUNE", True, _flag)
        put("HOROVOD_AUTOTUNE_LOG", args.autotune_log_file)
        put("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", args.autotune_warmup_samples)
        put("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", args.autotune_steps_per_sample)
        put("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", args.autotune_bayes_opt_max_samples)
        put("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", args.autotune_gaussian_process_noise)
    if args.timeline_filename:
        put("HOROVOD_TIMELINE", args.timeline_filename)
        put("HOROVOD_TIMELINE_MARK_CYCLES", args.timeline_mark_cycles, _flag)
    put("HOROVOD_STALL_CHECK_DISABLE", args.no_stall_check, _flag)
    put("HOROVOD_STALL_CHECK_TIME_SECONDS", args.stall_check_warning_time_seconds)
    put("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", args.stall_check_shutdown_time_seconds)
    put("HOROVOD_LOG_LEVEL", args.log_level)
    put("HOROVOD_LOG_HIDE_TIME", args.log_with_timestamp, lambda v: _flag(not v))
    return env


def omp_threads(cores, ranks_per_host):
    """OpenMP threads per rank so the ranks of one host share its cores: at least 1."""
    return max(1, cores // max(1, ranks_per_host))


_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def env_switch(environ, name, default, meanings):
    """The on/off variable ``name`` of ``environ``: ``default`` when unset or empty; True
    for 1/true/yes/on, False for 0/false/no/off (any case).

    Raises:
        ValueError: any other value, naming the variable, its value and ``meanings`` (what
            1 and 0 mean, for the message).
    """
    text = environ.get(name, "").strip().lower()
    if not text:
        return default
    if text in _ON:
        return True
    if text in _OFF:
        return False
    raise ValueError("%s=%s: %s" % (name, environ[name], meanings))
