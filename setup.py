"""Build mxhorovod's C++ extension.

It compiles against MXNet's headers (from the mxnet package in the build environment, which
pip's build isolation fills from pyproject.toml's build requirements) and an MPICH-ABI MPI
(the mpich wheel of the build environment, else ``mpicxx`` on PATH, or the one
``MXHOROVOD_MPICXX`` names). The module names libmxnet and libmpi by SONAME only and carries
no path of the build environment: at import, mxhorovod/common/binding.py loads the user's libmxnet
(by importing mxnet) and libmpi first. One wheel serves every node and every mxnet 1.9.x
distribution.

    pip install .                          # into the environment you train in
    pip wheel . -w dist/                   # a wheel to install on every node
    pip install --no-build-isolation -e .  # development, with the build tools installed
"""
import glob
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext as _setuptools_build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
MPI_SONAME = "libmpi.so.12"
BUILD_TOOLS = "pip install setuptools wheel pybind11"


def fail(msg):
    sys.stderr.write("\nmxhorovod build error: %s\n\n" % msg)
    raise SystemExit(1)


def _elf():
    """mxhorovod/common/elf.py, loaded by path (the package itself needs mxnet to import)."""
    spec = importlib.util.spec_from_file_location("_mxhorovod_elf",
                                                  os.path.join(HERE, "mxhorovod", "common", "elf.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def find_mxnet():
    """(include dir, path of libmxnet.so, version) of the mxnet package of the build
    environment, found without importing it (its import needs numpy < 1.24)."""
    spec = importlib.util.find_spec("mxnet")
    if spec is None or not spec.submodule_search_locations:
        fail("mxnet is not installed in the Python that runs this build (%s).\n"
             "pip builds a package in an isolated environment by default (build isolation):\n"
             "it installs pyproject.toml's build requirements there, mxnet's headers among\n"
             "them, and ignores what this environment holds. Either:\n"
             "  - build with pip's defaults (no --no-build-isolation): pip install .\n"
             "  - or, to build with --no-build-isolation, install mxnet and the build tools\n"
             "    in this environment first:\n"
             "        pip install mxnet==1.9.1 'numpy<1.24' mpich setuptools wheel pybind11"
             % sys.executable)
    pkg = list(spec.submodule_search_locations)[0]
    inc, lib = os.path.join(pkg, "include"), os.path.join(pkg, "libmxnet.so")
    if not os.path.exists(os.path.join(inc, "mxnet", "c_api.h")) or not os.path.exists(lib):
        fail("the mxnet package at %s has no C headers (include/mxnet/c_api.h) or no "
             "libmxnet.so; install a PyPI build: pip install mxnet==1.9.1" % pkg)
    version = "unknown"
    try:
        with open(os.path.join(pkg, "libinfo.py")) as f:
            m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", f.read())
        version = m.group(1) if m else version
    except OSError:
        pass
    if not version.startswith("1.9"):
        fail("mxnet %s is in the build environment; mxhorovod builds against MXNet 1.9.x:\n"
             "    pip install mxnet==1.9.1" % version)
    return inc, lib, version


def _mpich_wheel():
    """(include dirs, lib dirs) of the mpich wheel in the build environment, or None."""
    import importlib.metadata
    try:
        dist = importlib.metadata.distribution("mpich")
    except importlib.metadata.PackageNotFoundError:
        return None
    files = [str(dist.locate_file(f)) for f in dist.files or ()]
    hdr = [os.path.dirname(f) for f in files if os.path.basename(f) == "mpi.h"]
    lib = [os.path.dirname(f) for f in files if os.path.basename(f) == "libmpi.so"]
    if hdr and lib:
        return [os.path.realpath(hdr[0])], [os.path.realpath(lib[0])]
    return None


def _wrapper_flags(wrapper):
    """(include dirs, lib dirs) from ``wrapper -show`` (MPICH, Intel MPI, MVAPICH)."""
    try:
        show = subprocess.check_output([wrapper, "-show"], text=True,
                                       stderr=subprocess.STDOUT).split()
    except (OSError, subprocess.CalledProcessError) as e:
        fail("%s -show failed: %s" % (wrapper, e))
    inc = [t[2:] for t in show if t.startswith("-I")]
    libdirs = [t[2:] for t in show if t.startswith("-L")]
    return inc, libdirs


def find_mpi():
    """(include dirs, lib dir of libmpi.so, where from) of an MPICH-ABI MPI."""
    wrapper = os.environ.get("MXHOROVOD_MPICXX")  # an explicit choice wins
    if wrapper:
        if not shutil.which(wrapper):
            fail("MXHOROVOD_MPICXX=%s: no such program" % wrapper)
        inc, libdirs = _wrapper_flags(wrapper)
        origin = "MXHOROVOD_MPICXX=" + wrapper
    else:
        found = _mpich_wheel()
        if found:
            (inc, libdirs), origin = found, "the mpich wheel"
        else:
            wrapper = shutil.which("mpicxx") or shutil.which("mpic++")
            if not wrapper:
                fail("no MPI found to build against: no mpich wheel in the build environment "
                     "and no mpicxx on PATH.\n"
                     "  - with pip's defaults (build isolation), the mpich wheel comes from "
                     "pyproject.toml's build requirements; check that pip can install it;\n"
                     "  - with --no-build-isolation: pip install mpich\n"
                     "  - or put a system MPICH, Intel MPI or MVAPICH (its mpicxx) on PATH, "
                     "or name it: MXHOROVOD_MPICXX=/path/to/mpicxx")
            inc, libdirs = _wrapper_flags(wrapper)
            origin = wrapper
    if not any(os.path.exists(os.path.join(d, "mpi.h")) for d in inc):
        fail("the MPI from %s has no mpi.h in %s" % (origin, inc or "any include directory"))
    elf = _elf()
    for d in libdirs:
        lib = os.path.join(d, "libmpi.so")
        if os.path.exists(lib):
            try:
                sonames = [v for k, v in elf.dynamic_entries(os.path.realpath(lib))
                           if k == "SONAME"]
            except elf.ElfError:  # a linker script, as the mpich wheel's: INPUT(libmpi.so.12)
                with open(lib, errors="replace") as f:
                    sonames = re.findall(r"libmpi\.so[.\d]*", f.read())[:1]
            if sonames and sonames[0] != MPI_SONAME:
                fail("the MPI from %s is not MPICH-ABI: its libmpi's SONAME is %s, not %s "
                     "(Open MPI?). mxhorovod runs on MPICH, Intel MPI or MVAPICH: "
                     "pip install mpich" % (origin, sonames[0], MPI_SONAME))
            return inc, d, origin
    fail("the MPI from %s has no libmpi.so in %s" % (origin, libdirs))


def check_compiler():
    """Fail with what to install when the C++ compiler that setuptools will call is missing."""
    cxx = os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++"
    prog = shlex.split(cxx)[0]
    if not shutil.which(prog):
        fail("no C++ compiler: `%s` (CXX) is not on PATH. Install one (Debian/Ubuntu: "
             "apt-get install g++; RHEL/Fedora: dnf install gcc-c++), or set CXX. To install "
             "on machines without a compiler, build a wheel once where one is and install "
             "that wheel (docs/install.md)." % prog)


def build_tools():
    """pybind11 and its parallel compile, or a clear error when a --no-build-isolation build
    lacks them."""
    try:
        import pybind11
        from pybind11.setup_helpers import ParallelCompile
    except ImportError as e:
        fail("the build tools are missing (%s). pip installs them itself with its defaults "
             "(build isolation); with --no-build-isolation, install them first:\n    %s"
             % (e, BUILD_TOOLS))
    return pybind11, ParallelCompile


class build_ext(_setuptools_build_ext):
    """Finds and checks the compiler, MXNet's headers and MPI when the extension is built,
    not before: metadata and the sdist need none of them. Links with no RPATH/RUNPATH: the
    Python's own link flags (a pyenv or conda Python adds -Wl,-rpath,<its lib>) would bake
    in a path of the build machine."""

    def build_extensions(self):
        pybind11, ParallelCompile = build_tools()
        check_compiler()
        mx_inc, mx_lib, mx_version = find_mxnet()
        mpi_inc, mpi_libdir, _ = find_mpi()
        # The sources compile in parallel: MXHOROVOD_BUILD_JOBS jobs (default: every core).
        ParallelCompile("MXHOROVOD_BUILD_JOBS", default=0).install()
        for ext in self.extensions:
            ext.include_dirs += [pybind11.get_include(), mx_inc] + mpi_inc
            ext.library_dirs += [mpi_libdir]
            # libmxnet.so, linked by path, is NEEDED by its SONAME (libmxnet.so); no rpath:
            # the import of mxnet loads it first (mxhorovod/common/binding.py), and so for libmpi.
            ext.extra_link_args += [mx_lib]
            # shown by `mxhorovodrun --check-build` (mxhorovod._core.MXNET_VERSION)
            ext.define_macros += [("MXHOROVOD_MXNET_VERSION", '"%s"' % mx_version)]
        self.compiler.linker_so = [a for a in self.compiler.linker_so
                                   if not a.startswith(("-Wl,-rpath", "-Wl,-R"))]
        super().build_extensions()


EXTENSION = Extension(
    "mxhorovod._core",
    sorted(glob.glob("src/common/*.cc") + glob.glob("src/ops/*.cc") +
           glob.glob("src/mxnet/*.cc") + glob.glob("src/python/*.cc")),
    include_dirs=["include", "src"],
    # a header edited after a build rebuilds the sources (setuptools compares times)
    depends=sorted(glob.glob("include/mxhorovod/*.h") + glob.glob("src/*/*.h")),
    libraries=["mpi"],
    # libmxnet.so in every 1.9.x wheel uses the pre-C++11 std::string ABI; the inline code we
    # use from its headers (dmlc::Error) must match it.
    define_macros=[("_GLIBCXX_USE_CXX11_ABI", "0"), ("DMLC_USE_CXX11", "1")],
    # -g0: no debug info (Python's own CFLAGS ask for -g: a 24 MB module instead of 1 MB).
    extra_compile_args=["-std=c++17", "-O3", "-g0", "-fvisibility=hidden", "-Wall",
                        "-Wno-unused-function"],
    language="c++",
)

# Name, version, dependencies and the mxhorovodrun console script: pyproject.toml. The
# launcher is a package of its own (mxhorovodrun, standard library only), so that starting a
# job does not import mxhorovod and MXNet.
setup(
    packages=find_packages(include=["mxhorovod", "mxhorovod.*", "mxhorovodrun"]),
    ext_modules=[EXTENSION],
    cmdclass={"build_ext": build_ext},
)
