"""The build: clear messages when MXNet or MPI is missing, and a module that needs no
LD_LIBRARY_PATH and imports no MXNet C++ symbol (it must survive wheels that hide them)."""
import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _setup(tmp_path, env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "setup.py", "--name"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)


def test_build_without_mxnet_says_what_to_install(tmp_path):
    shadow = tmp_path / "mxnet"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('no mxnet here')\n")
    proc = _setup(tmp_path, {"PYTHONPATH": str(tmp_path)})
    assert proc.returncode != 0
    assert "pip install 'mxnet==1.9.1' 'numpy<1.24'" in proc.stdout, proc.stdout


def test_build_without_mpi_says_what_to_install(tmp_path):
    proc = _setup(tmp_path, {"MXHOROVOD_MPICXX": str(tmp_path / "no-mpicxx")})
    assert proc.returncode != 0
    assert "pip install mpich mpi4py" in proc.stdout, proc.stdout


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
