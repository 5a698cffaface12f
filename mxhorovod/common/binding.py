"""Bind mxhorovod's extension to the user's MXNet and MPI, before the extension loads.

The extension (``mxhorovod._core``) names its libraries only by SONAME (``libmxnet.so``,
``libmpi.so.12``), and the dynamic loader reuses a library already loaded under that
SONAME, so this module loads them first:

1. libmxnet: by importing the installed ``mxnet`` package (any mxnet 1.9.x distribution),
   after checking its version, its C API and its C++ ABI.
2. libmpi (an MPICH-ABI ``libmpi.so.12``: MPICH, Intel MPI, MVAPICH), the first found of:
   one already loaded (mpi4py imported first); the file that ``MXHOROVOD_MPI_LIB`` names;
   the ``mpich`` wheel of this environment; ``libmpi.so.12`` on the loader's path.

Each failure raises ``ImportError`` saying what to install or set.
"""
import ctypes
import importlib.metadata
import os
import re

from mxhorovod.common import elf

__all__ = ["prepare", "load_extension", "loaded_library", "LOADED", "REQUIRED_MXNET_SYMBOLS", "MPI_SONAME"]

# What prepare() loaded: {"libmxnet": path, "libmpi": path, "libmpi_from": where it came from}
# (shown by `mxhorovodrun --check-build`).
LOADED = {}

MPI_SONAME = "libmpi.so.12"

# The C API functions of libmxnet that the extension calls (tests/install/test_install.py checks the
# list against the extension's undefined symbols).
REQUIRED_MXNET_SYMBOLS = (
    "MXAutogradIsRecording", "MXEnginePushAsyncND", "MXGetLastError", "MXIsNumpyShape",
    "MXNDArrayCallDLPackDeleter", "MXNDArrayFree", "MXNDArrayGetContext", "MXNDArrayGetDType",
    "MXNDArrayGetData", "MXNDArrayGetGradState", "MXNDArrayGetShapeEx",
    "MXNDArrayGetStorageType", "MXNDArrayToDLPack", "MXNDArrayWaitToRead",
    "MXNDArrayWaitToWrite", "MXShallowCopyNDArray",
)

_NUMPY_HINT = "pip install 'numpy<1.24'   (numpy 1.23.5 works with MXNet 1.9.1)"
_MXNET_HINT = ("pip install mxnet==1.9.1 'numpy<1.24'   (or the mxnet-cuXXX / mxnet-mkl "
               "1.9.x build you train with)")


def import_mxnet():
    """Import mxnet, or raise ImportError saying how to get a working one."""
    try:
        import mxnet
    except ModuleNotFoundError as e:
        if e.name != "mxnet":
            raise _numpy_or(e) from e
        raise ImportError("mxhorovod needs MXNet 1.9.x, and mxnet is not installed in this "
                          "environment. Install it:\n    " + _MXNET_HINT) from e
    except Exception as e:  # numpy >= 1.24 breaks mxnet's import (np.bool)
        raise _numpy_or(e) from e
    return mxnet


def _numpy_or(error):
    """The ImportError for an installed mxnet that fails to import."""
    numpy_version = None
    try:
        import numpy
        numpy_version = numpy.__version__
    except Exception:
        pass
    cause = "%s: %s" % (type(error).__name__, str(error).strip().splitlines()[0]
                        if str(error).strip() else "")
    if numpy_version and _version_tuple(numpy_version) >= (1, 24):
        return ImportError(
            "mxnet is installed but fails to import (%s): MXNet 1.9 needs numpy < 1.24, "
            "and numpy %s is installed. Install an older numpy:\n    %s"
            % (cause, numpy_version, _NUMPY_HINT))
    return ImportError("mxnet is installed but fails to import (%s). Check that "
                       "`python -c 'import mxnet'` works in this environment." % cause)


def _version_tuple(text):
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def check_mxnet_version(version):
    """Raise ImportError unless ``version`` (mxnet.__version__) is 1.9.x."""
    if _version_tuple(version)[:2] != (1, 9):
        raise ImportError(
            "mxhorovod supports MXNet 1.9.x (its C API and engine), and MXNet %s is "
            "installed. Install MXNet 1.9:\n    %s" % (version, _MXNET_HINT))


def check_c_api(lib, path, names=REQUIRED_MXNET_SYMBOLS):
    """Raise ImportError naming each function of ``names`` that ``lib`` (a ctypes CDLL of
    libmxnet at ``path``) does not export."""
    missing = [n for n in names if not hasattr(lib, n)]
    if missing:
        raise ImportError(
            "the libmxnet in use (%s) lacks C API function%s that mxhorovod calls: %s. It is "
            "not an MXNet 1.9 build, or was built without them. Install MXNet 1.9:\n    %s"
            % (path, "s" if len(missing) > 1 else "", ", ".join(missing), _MXNET_HINT))


def check_cxx_abi(path):
    """Raise ImportError if libmxnet at ``path`` was built with libstdc++'s new C++ ABI.

    The extension compiles MXNet's inline header code (the engine's completion callback,
    dmlc::Error) with ``_GLIBCXX_USE_CXX11_ABI=0``, as every PyPI wheel of MXNet 1.x is
    built. The ABI is read off the C++ names libmxnet exports (:func:`mxhorovod.common.elf.cxx11_abi`).
    """
    try:
        new_abi = elf.cxx11_abi(path)
    except (OSError, elf.ElfError):
        return  # cannot tell: let the extension try
    if new_abi:
        raise ImportError(
            "the libmxnet in use (%s) was built with libstdc++'s new C++ ABI "
            "(_GLIBCXX_USE_CXX11_ABI=1); mxhorovod is built for the old one, as every MXNet "
            "wheel on PyPI is. Use a PyPI build of MXNet 1.9.x, or rebuild MXNet with "
            "-D_GLIBCXX_USE_CXX11_ABI=0." % path)


def loaded_library(prefix):
    """The path of the first library file whose name starts with ``prefix`` (e.g.
    ``"libmpi.so"``) mapped into this process, from /proc/self/maps; None if none."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").partition("/")[2]
                if path and os.path.basename("/" + path).startswith(prefix):
                    return "/" + path
    except OSError:
        pass
    return None


def _mpich_wheel_lib():
    """libmpi.so.12 of the ``mpich`` wheel installed in this environment, if any."""
    try:
        dist = importlib.metadata.distribution("mpich")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if os.path.basename(str(f)) == MPI_SONAME:
            path = os.path.realpath(str(dist.locate_file(f)))
            if os.path.exists(path):
                return path
    return None


def find_libmpi(environ=os.environ):
    """The libmpi to load: (path or soname, where it came from). See the module's docstring
    for the order. Raises ImportError when none is found."""
    loaded = loaded_library(MPI_SONAME)
    if loaded:
        return loaded, "already loaded in this process"
    explicit = environ.get("MXHOROVOD_MPI_LIB")
    if explicit:
        if not os.path.exists(explicit):
            raise ImportError("MXHOROVOD_MPI_LIB=%s: no such file. Name an MPICH-ABI %s "
                              "(MPICH, Intel MPI, MVAPICH), or unset it to use the mpich "
                              "wheel: pip install mpich" % (explicit, MPI_SONAME))
        return explicit, "MXHOROVOD_MPI_LIB"
    wheel = _mpich_wheel_lib()
    if wheel:
        return wheel, "the mpich wheel"
    return MPI_SONAME, "the loader's path"


def load_libmpi(environ=os.environ):
    """Load libmpi globally (so that the extension's NEEDED libmpi.so.12 resolves to it);
    return (its path, where it came from)."""
    path, origin = find_libmpi(environ)
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        if origin == "the loader's path":
            raise ImportError(
                "mxhorovod found no MPI library (%s). Install MPI in this environment:\n"
                "    pip install mpich\n"
                "or, for a system MPICH, Intel MPI or MVAPICH, put its lib folder on "
                "LD_LIBRARY_PATH or set MXHOROVOD_MPI_LIB=/path/to/%s"
                % (e, MPI_SONAME)) from e
        raise ImportError("mxhorovod cannot load the MPI library %s (from %s): %s"
                          % (path, origin, e)) from e
    return loaded_library(MPI_SONAME) or path, origin


def prepare(environ=os.environ):
    """Load and check libmxnet and libmpi so that ``mxhorovod._core`` can load.

    Returns:
        ``(libmxnet path, libmpi path)``.
    Raises:
        ImportError: mxnet missing, not importable (numpy >= 1.24), not 1.9.x, lacking a C
        API function, built with the new C++ ABI; or no MPI library found.
    """
    mxnet = import_mxnet()
    check_mxnet_version(getattr(mxnet, "__version__", "unknown"))
    lib = mxnet.base._LIB  # ctypes.CDLL of the libmxnet.so that mxnet loaded
    mxnet_path = os.path.realpath(lib._name)
    check_c_api(lib, mxnet_path)
    check_cxx_abi(mxnet_path)
    mpi_path, mpi_from = load_libmpi(environ)
    LOADED.update(libmxnet=mxnet_path, libmpi=os.path.realpath(mpi_path), libmpi_from=mpi_from)
    return mxnet_path, LOADED["libmpi"]


def load_extension(environ=os.environ):
    """:func:`prepare`, then import the extension ``mxhorovod._core`` (it must come after:
    the extension names libmxnet and libmpi by SONAME only). Returns the module.

    Raises:
        ImportError: as :func:`prepare`; or the extension failed to load, with what to do.
    """
    prepare(environ)
    try:
        import mxhorovod._core as _core
    except ImportError as e:
        raise ImportError("mxhorovod's extension (mxhorovod._core) failed to load: %s. Check the "
                          "install with `mxhorovodrun --check-build`; rebuild with "
                          "`pip install --force-reinstall --no-cache-dir mxhorovod` (or your "
                          "wheel or checkout)." % e) from e
    return _core
