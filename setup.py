"""Build mxhorovod's C++ extension against the installed MXNet and MPI.

MXNet's include and library paths come from mxnet.libinfo; MPI's flags from the installed
MPI compiler wrapper (`mpicxx -show`, found next to this Python first, then on PATH). The
module gets rpaths to libmxnet.so and libmpi.so, so importing it needs no LD_LIBRARY_PATH.
Build with `pip install --no-build-isolation .` (or `-e .`) inside the venv that has mxnet
and mpich.
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg):
    sys.stderr.write("\nmxhorovod build error: %s\n\n" % msg)
    raise SystemExit(1)


def mxnet_paths():
    try:
        import mxnet.libinfo as libinfo
    except Exception as e:  # ImportError, or numpy>=1.24 breaking mxnet's import
        fail("cannot import mxnet (%s). Install it first, in the same venv:\n"
             "    pip install 'mxnet==1.9.1' 'numpy<1.24'\n"
             "and build with: pip install --no-build-isolation ." % e)
    libs = libinfo.find_lib_path()
    inc = libinfo.find_include_path()
    if not libs or not os.path.isdir(os.path.join(inc, "mxnet")):
        fail("mxnet is installed but its headers or libmxnet.so were not found (%s, %s)" % (inc, libs))
    return inc, os.path.dirname(os.path.abspath(libs[0]))


def mxnet_version():
    import mxnet.libinfo as libinfo
    return libinfo.__version__


def mpi_flags():
    wrapper = os.environ.get("MXHOROVOD_MPICXX")  # an explicit choice wins
    if wrapper and not os.path.exists(wrapper):
        fail("MXHOROVOD_MPICXX=%s does not exist. Install MPI in this venv:\n"
             "    pip install mpich mpi4py" % wrapper)
    for name in ("mpicxx", "mpic++"):
        if wrapper:
            break
        cand = os.path.join(os.path.dirname(sys.executable), name)
        if os.path.exists(cand):
            wrapper = cand
            break
        wrapper = wrapper or shutil.which(name)
    if not wrapper:
        fail("no MPI compiler wrapper (mpicxx) found. Install MPI in this venv:\n"
             "    pip install mpich mpi4py")
    try:
        show = subprocess.check_output([wrapper, "-show"], text=True).split()
    except Exception as e:
        fail("%s -show failed: %s" % (wrapper, e))
    inc, libdirs, libs, rpaths = [], [], [], []
    for tok in show[1:]:
        if tok.startswith("-I"):
            inc.append(tok[2:])
        elif tok.startswith("-L"):
            libdirs.append(tok[2:])
        elif tok.startswith("-l"):
            libs.append(tok[2:])
        elif tok.startswith("-Wl,-rpath,"):
            rpaths.append(tok[len("-Wl,-rpath,"):])
    it = iter(show)
    for tok in it:  # "-Wl,-rpath -Wl,/dir" as two tokens
        if tok == "-Wl,-rpath":
            nxt = next(it, "")
            rpaths.append(nxt.replace("-Wl,", ""))
    if not any(os.path.exists(os.path.join(d, "mpi.h")) for d in inc):
        fail("%s -show names no include directory with mpi.h: %s" % (wrapper, " ".join(show)))
    return inc, libdirs, libs, sorted(set(rpaths + libdirs))


def extension():
    from pybind11.setup_helpers import Pybind11Extension
    mx_inc, mx_lib = mxnet_paths()
    mpi_inc, mpi_libdirs, mpi_libs, mpi_rpaths = mpi_flags()
    sources = sorted(glob.glob("src/common/*.cc") + glob.glob("src/ops/*.cc") +
                     glob.glob("src/mxnet/*.cc") + glob.glob("src/python/*.cc"))
    return Pybind11Extension(
        "mxhorovod._core",
        sources,
        include_dirs=["include", "src", mx_inc] + mpi_inc,
        library_dirs=[mx_lib] + mpi_libdirs,
        libraries=mpi_libs,
        # libmxnet.so has no "lib*.so" linker name in the wheel's folder layout, so link it
        # by path; rpath lets the module find it (and libmpi) at import.
        extra_link_args=[os.path.join(mx_lib, "libmxnet.so"), "-Wl,--disable-new-dtags"] +
                        ["-Wl,-rpath," + d for d in [mx_lib] + mpi_rpaths],
        # libmxnet.so in the 1.9.1 wheel uses the pre-C++11 std::string ABI; the inline code
        # we use from its headers (dmlc::Error) must match it.
        define_macros=[("_GLIBCXX_USE_CXX11_ABI", "0"), ("DMLC_USE_CXX11", "1"),
                       # shown by `mxhorovodrun --check-build` (mxhorovod._core.MXNET_VERSION)
                       ("MXHOROVOD_MXNET_VERSION", '"%s"' % mxnet_version())],
        extra_compile_args=["-O3", "-Wall", "-Wno-unused-function"],
        cxx_std=17,
    )


# Name, version and the mxhorovodrun console script: pyproject.toml ([project]). The
# launcher is a package of its own (mxhorovodrun, standard library only), so that starting
# a job does not import mxhorovod and MXNet.
setup(
    packages=find_packages(include=["mxhorovod", "mxhorovod.*", "mxhorovodrun"]),
    ext_modules=[extension()],
)
