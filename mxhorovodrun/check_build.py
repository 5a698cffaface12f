"""``mxhorovodrun --check-build``: horovodrun's report, plus the MXNet this build was made
against, the one running, the MPI that mxhorovodrun would launch with, and the paths of the
mxhorovod package imported and of the libmxnet and libmpi that its extension bound to."""
import os

from mxhorovodrun.mpi import LaunchError, detect, find_mpirun

__all__ = ["check_build_text"]

_MXNET_FEATURES = ("MKLDNN", "OPENMP", "CUDA", "NCCL")


def _x(value):
    return "X" if value else " "


def _mpi_line(environ):
    try:
        mpi = detect(find_mpirun(environ))
    except LaunchError as e:
        return "MPI launcher: none usable (%s)" % str(e).splitlines()[0]
    return "MPI launcher: %s %s (%s)" % (mpi.flavour, mpi.version, mpi.path)


def check_build_text(environ=None, verbose=False):
    """The report as text. Imports mxhorovod's extension (and so MXNet).

    Raises:
        ImportError: mxhorovod cannot be imported; the message says what to install or set.
    """
    import mxhorovod  # first: its import checks mxnet and MPI and says what is wrong
    import mxnet as mx
    import mxhorovod._core as _core
    from mxhorovod.common import basics, binding

    built = getattr(_core, "MXNET_VERSION", None)
    try:
        features = mx.runtime.Features()
        enabled = [f for f in _MXNET_FEATURES if features.is_enabled(f)]
    except Exception:  # an MXNet without the feature list
        enabled = []
    lines = [
        "mxhorovod v%s:" % mxhorovod.__version__,
        "",
        "MXNet: built against %s, running %s%s" % (
            built or "unknown (extension built before versions were recorded)", mx.__version__,
            "  <-- MISMATCH: rebuild mxhorovod" if built and built != mx.__version__ else ""),
        _mpi_line(environ),
        # A checkout in the current folder shadows an installed package: say which one runs.
        "mxhorovod loaded: %s" % os.path.dirname(os.path.abspath(mxhorovod.__file__)),
        "libmxnet loaded: %s" % binding.LOADED.get("libmxnet", "unknown"),
        "libmpi loaded: %s (from %s)" % (binding.LOADED.get("libmpi", "unknown"),
                                         binding.LOADED.get("libmpi_from", "unknown")),
        "",
        "Available Frameworks:",
        "    [ ] TensorFlow",
        "    [ ] PyTorch",
        "    [X] MXNet",
        "",
        "Available Controllers:",
        "    [%s] MPI" % _x(basics.mpi_built()),
        "    [%s] Gloo" % _x(basics.gloo_built()),
        "",
        "Available Tensor Operations:",
        "    [%s] NCCL" % _x(basics.nccl_built()),
        "    [%s] DDL" % _x(basics.ddl_built()),
        "    [%s] CCL" % _x(basics.ccl_built()),
        "    [%s] MPI" % _x(basics.mpi_built()),
        "    [%s] Gloo" % _x(basics.gloo_built()),
        "",
        "Features:",
        "    [X] CPU tensors",
        "    [%s] GPU tensors (CUDA)" % _x(basics.cuda_built()),
        "    [%s] GPU tensors (ROCm)" % _x(basics.rocm_built()),
        "    [X] kvstore 'horovod' (mx.kv.create('horovod'))",
        "    [X] Adasum (op=hvd.Adasum: collectives, DistributedTrainer, DistributedOptimizer)",
        "    MXNet runtime: %s" % (", ".join(enabled) if enabled else "none of " +
                                   ", ".join(_MXNET_FEATURES)),
    ]
    text = "\n".join(lines)
    return ("\n" + text) if verbose else text
