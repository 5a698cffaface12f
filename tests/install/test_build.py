"""The build and the binding at import: errors that say what to do (no MPI, no compiler, no
mxnet in the build environment; at import: no mxnet, numpy >= 1.24, a wrong MXNet version, a
libmxnet lacking a C API function or built with the new C++ ABI), and a module that carries
no path of the build machine and imports no MXNet C++ symbol."""
import glob
import os
import subprocess
import sys
import textwrap

import pytest

from mxhorovod.common import binding, elf

from support.paths import ROOT


def _python(code, env_extra=None, cwd=ROOT):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)


def _build_ext(prelude="", env_extra=None):
    """setup.py build_ext with ``prelude`` run first in the same process: it fails in the
    checks before compiling anything."""
    return _python(textwrap.dedent(prelude) + textwrap.dedent("""
        import runpy, sys
        sys.argv = ["setup.py", "build_ext", "--build-lib", "/nonexistent"]
        runpy.run_path("setup.py", run_name="__main__")
        """), env_extra)


def test_build_without_mxnet_explains_build_isolation():
    proc = _build_ext("import sys; sys.modules['mxnet'] = None\n")
    assert proc.returncode != 0
    assert "mxnet is not installed in the Python that runs this build" in proc.stdout, proc.stdout
    assert "build isolation" in proc.stdout
    assert "pip install ." in proc.stdout  # way out 1: pip's defaults
    assert "pip install mxnet==1.9.1 'numpy<1.24' mpich" in proc.stdout  # way out 2


def test_build_without_mpi_says_what_to_install():
    no_mpich = """
        import importlib.metadata as md
        _real = md.distribution
        def _distribution(name):
            if name == "mpich":
                raise md.PackageNotFoundError(name)
            return _real(name)
        md.distribution = _distribution
        """
    proc = _build_ext(no_mpich, {"PATH": "/usr/bin:/bin"})  # no mpicxx on this PATH
    assert proc.returncode != 0
    assert "no MPI found to build against" in proc.stdout, proc.stdout
    assert "pip install mpich" in proc.stdout
    assert "MXHOROVOD_MPICXX=/path/to/mpicxx" in proc.stdout


def test_build_with_a_missing_mpicxx_names_it(tmp_path):
    proc = _build_ext(env_extra={"MXHOROVOD_MPICXX": str(tmp_path / "no-mpicxx")})
    assert proc.returncode != 0
    assert "MXHOROVOD_MPICXX=%s: no such program" % (tmp_path / "no-mpicxx") in proc.stdout


def test_build_without_compiler_says_what_to_install():
    proc = _build_ext(env_extra={"CXX": "/nonexistent/g++"})
    assert proc.returncode != 0
    assert "no C++ compiler: `/nonexistent/g++` (CXX) is not on PATH" in proc.stdout, proc.stdout
    assert "apt-get install g++" in proc.stdout


def test_build_without_build_tools_lists_them():
    proc = _build_ext("import sys; sys.modules['pybind11'] = None\n")
    assert proc.returncode != 0
    assert "the build tools are missing" in proc.stdout, proc.stdout
    assert "pip install setuptools wheel pybind11" in proc.stdout


def test_sdist_needs_neither_mxnet_nor_mpi(tmp_path):
    proc = _python("""
        import sys
        sys.modules['mxnet'] = None
        sys.modules['pybind11'] = None
        sys.argv = ["setup.py", "-q", "egg_info", "--egg-base", %r]
        import runpy
        runpy.run_path("setup.py", run_name="__main__")
        """ % str(tmp_path))
    assert proc.returncode == 0, proc.stdout
    sources = (tmp_path / "mxhorovod.egg-info" / "SOURCES.txt").read_text()
    for needed in ("include/mxhorovod/c_api.h", "src/common/common.h", "src/ops/backend.h",
                   "src/python/module.cc", "setup.py", "pyproject.toml", "mxhorovod/common/elf.py"):
        assert needed in sources, needed
    # The repository's development tools (devtools/) and tests are never shipped.
    shipped = [line for line in sources.splitlines() if line.startswith(("devtools/", "tests/"))
               or "mxhorovod_devtools" in line]
    assert not shipped, shipped


# --- at import, before the extension loads ---

def _import_error(prelude, env_extra=None):
    proc = _python(prelude + "\nimport mxhorovod\n", env_extra, cwd="/")
    assert proc.returncode != 0, proc.stdout
    assert "ImportError" in proc.stdout, proc.stdout
    return proc.stdout


def test_import_without_mxnet_says_what_to_install():
    out = _import_error("import sys; sys.modules['mxnet'] = None")
    assert "mxhorovod needs MXNet 1.9.x, and mxnet is not installed" in out, out
    assert "pip install mxnet==1.9.1 'numpy<1.24'" in out


def test_import_with_numpy_1_24_names_the_numpy_to_install():
    # numpy 1.24 removed np.bool, which MXNet 1.9's import uses.
    out = _import_error("import numpy; numpy.__version__ = '1.26.4'; "
                        "numpy.__deprecated_attrs__.pop('bool', None)")
    assert "MXNet 1.9 needs numpy < 1.24, and numpy 1.26.4 is installed" in out, out
    assert "pip install 'numpy<1.24'" in out


@pytest.mark.parametrize("version", ["2.0.0", "1.8.0"])
def test_import_with_another_mxnet_version_says_which(version):
    out = _import_error("import mxnet; mxnet.__version__ = %r" % version)
    expected = "mxhorovod supports MXNet 1.9.x (its C API and engine), and MXNet %s is installed"
    assert expected % version in out, out


_LIB_WITHOUT = """
import mxnet
class _Lib:  # the real libmxnet, less one C function; _name: the file it says it is
    def __init__(self, lib, name):
        self._lib, self._name = lib, name
    def __getattr__(self, attr):
        if attr == "MXEnginePushAsyncND":
            raise AttributeError(attr)
        return getattr(self._lib, attr)
mxnet.base._LIB = _Lib(mxnet.base._LIB, %r)
"""


def test_import_names_a_missing_c_api_function():
    import mxnet
    out = _import_error(_LIB_WITHOUT % mxnet.base._LIB._name)
    assert "lacks C API function that mxhorovod calls: MXEnginePushAsyncND" in out, out


def _library(tmp_path, abi):
    src = tmp_path / "abi.cc"
    src.write_text('#include <string>\nstd::string greet(const std::string& s) '
                   '{ return "hello " + s; }\n')
    out = tmp_path / ("libabi%d.so" % abi)
    subprocess.run(["g++", "-shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi, str(src),
                    "-o", str(out)], check=True)
    return str(out)


def test_cxx11_abi_is_read_off_exported_names(tmp_path):
    import mxnet
    assert elf.cxx11_abi(_library(tmp_path, 1)) is True
    assert elf.cxx11_abi(_library(tmp_path, 0)) is False
    assert elf.cxx11_abi(os.path.realpath(mxnet.base._LIB._name)) is False  # every PyPI wheel


def test_import_refuses_a_libmxnet_of_the_new_cxx_abi(tmp_path):
    # The check reads the file mxnet loaded; here it is told that file is a new-ABI library.
    # The real libmxnet answers the C API check, so the ABI check is the one that fails.
    out = _import_error(_LIB_WITHOUT.replace('attr == "MXEnginePushAsyncND"', "False")
                        % _library(tmp_path, 1))
    assert "was built with libstdc++'s new C++ ABI (_GLIBCXX_USE_CXX11_ABI=1)" in out, out


def test_import_with_a_missing_mpi_lib_names_the_setting(tmp_path):
    out = _import_error("", {"MXHOROVOD_MPI_LIB": str(tmp_path / "libmpi.so.12")})
    assert "MXHOROVOD_MPI_LIB=%s: no such file" % (tmp_path / "libmpi.so.12") in out, out


def test_import_takes_the_mpi_lib_the_setting_names():
    wheel = binding._mpich_wheel_lib()
    if wheel is None:
        pytest.skip("no mpich wheel in this environment")
    proc = _python("import mxhorovod.common.binding as b, mxhorovod; print(b.LOADED)",
                   {"MXHOROVOD_MPI_LIB": wheel}, cwd="/")
    assert proc.returncode == 0, proc.stdout
    assert "'libmpi_from': 'MXHOROVOD_MPI_LIB'" in proc.stdout, proc.stdout


# --- the built module ---

def _module():
    found = glob.glob(os.path.join(ROOT, "mxhorovod", "_core*.so"))
    if not found:
        import mxhorovod._core as core
        found = [core.__file__]
    return found[0]


def test_module_uses_only_mxnet_c_api():
    out = subprocess.run(["nm", "-D", "-C", "--undefined-only", _module()], stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    bad = [line for line in out.splitlines() if "mxnet::" in line]
    assert not bad, "C++ symbols of libmxnet imported:\n" + "\n".join(bad)
    assert "MXEnginePushAsyncND" in out


def test_required_c_api_list_is_what_the_module_imports():
    imported = {s for s in elf.undefined_symbols(_module()) if s.startswith("MX")}
    assert imported == set(binding.REQUIRED_MXNET_SYMBOLS)


def test_module_names_its_libraries_by_soname_and_carries_no_path():
    entries = elf.dynamic_entries(_module())
    needed = [v for k, v in entries if k == "NEEDED"]
    assert "libmxnet.so" in needed and "libmpi.so.12" in needed, needed
    assert not [e for e in entries if e[0] in ("RPATH", "RUNPATH")], entries


def test_import_needs_no_library_path():
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run([sys.executable, "-c", "import mxhorovod, mxhorovod._core"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("version", ["3.12", "3.9", None])
def test_setup_venv_names_the_pythons_it_needs(tmp_path, version):
    # Under a python3 of 3.12 (Ubuntu 24.04's), the README's first command made the venv and
    # then failed in pip: numpy 1.23.5, which MXNet 1.9.1 needs, has no wheel past 3.11.
    fake = tmp_path / "python-fake"
    answer = "echo %s" % version if version else "exit 1"
    fake.write_text('#!/bin/sh\ncase "$1" in -c) %s ;; *) exit 99 ;; esac\n' % answer)
    fake.chmod(0o755)
    venv = tmp_path / "venv"
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "setup_venv.sh")],
                          env=dict(os.environ, PYTHON=str(fake), VENV=str(venv)),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout
    assert "needs Python 3.10 or 3.11" in proc.stdout, proc.stdout
    assert "PYTHON=python3.11 bash scripts/setup_venv.sh" in proc.stdout, proc.stdout
    assert not venv.exists()
