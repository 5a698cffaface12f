"""One wheel for every node: a wheel built from the sdist in venv A (pip's defaults: build
isolation) installs into venv B, which holds only mxnet, numpy and mpich, after A is gone;
there it binds to B's libmxnet and libmpi, runs a 2-rank allreduce and passes the
single-process core tests. About 4 minutes on 2 cores (one build)."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from support.paths import ROOT

TESTED = {}  # the tested versions of requirements.txt: name -> "name==version"
with open(os.path.join(ROOT, "requirements.txt")) as _f:
    for _line in _f:
        _m = re.match(r"([A-Za-z0-9_.-]+)==\S+", _line)
        if _m:
            TESTED[_m.group(1).lower()] = _m.group(0)

ALLREDUCE = """
import numpy as np
import mxnet as mx
import mxhorovod as hvd
hvd.init()
x = mx.nd.array(np.arange(5) + 10 * hvd.rank(), dtype="float32")
got = hvd.allreduce(x, average=False, name="x").asnumpy()
want = sum(np.arange(5) + 10 * r for r in range(hvd.size()))
assert hvd.size() == 2 and np.array_equal(got, want), (got, want)
print("RANK %d OK" % hvd.rank(), flush=True)
"""


def _run(cmd, timeout, **kw):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, **kw)
    assert proc.returncode == 0, "%s exited %d:\n%s" % (" ".join(map(str, cmd)),
                                                      proc.returncode, proc.stdout[-6000:])
    return proc.stdout


def _venv(path):
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", str(path)], 120)
    return str(path / "bin" / "python")


@pytest.mark.slow
def test_wheel_built_in_one_venv_runs_in_another(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_NO_BUILD_ISOLATION")}
    pip = ["-m", "pip", "--disable-pip-version-check", "-q"]
    dist = tmp_path / "dist"
    # The sdist, then in venv A a wheel from it, with pip's defaults.
    _run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(dist),
          ROOT], 300, env=env)
    sdist = glob.glob(str(dist / "*.tar.gz"))[0]
    with tarfile.open(sdist) as tar:  # the license travels with the sources
        assert any(n.endswith("/LICENSE") for n in tar.getnames()), tar.getnames()
    venv_a = tmp_path / "a"
    _run([_venv(venv_a)] + pip + ["wheel", "--no-deps", "-w", str(dist), sdist], 1200, env=env)
    wheel = glob.glob(str(dist / "*.whl"))[0]
    shutil.rmtree(venv_a)
    with zipfile.ZipFile(wheel) as whl:  # and with the wheel: its text and the metadata
        names = whl.namelist()
        assert any(re.search(r"\.dist-info/(licenses/)?LICENSE$", n) for n in names), names
        meta = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        assert re.search(r"^License(-Expression)?: Apache-2\.0$", meta, re.M), meta[:2000]

    # Venv B: the user's environment, and no compiler anywhere on its way.
    venv_b = tmp_path / "b"
    py_b = _venv(venv_b)
    no_cc = dict(env, CC="/nonexistent/cc", CXX="/nonexistent/c++")
    _run([py_b] + pip + ["install", TESTED["mxnet"], TESTED["numpy"], TESTED["mpich"],
                         TESTED["pytest"], wheel], 900, env=no_cc)
    core = glob.glob(str(venv_b / "lib" / "python*" / "site-packages" / "mxhorovod" / "_core*.so"))
    with open(core[0], "rb") as f:  # no path of the build: its venv, pip's build folders
        data = f.read()
    for path in (str(venv_a), "/pip-build-env-", "/pip-req-build-", "/pip-install-", ROOT):
        assert path.encode() not in data, path

    out = _run([str(venv_b / "bin" / "mxhorovodrun"), "--check-build"], 300, env=no_cc,
               cwd=str(tmp_path))
    site = glob.glob(str(venv_b / "lib" / "python*" / "site-packages"))[0]
    assert "libmxnet loaded: %s/mxnet/libmxnet.so" % os.path.realpath(site) in out, out
    loaded = re.search(r"^mxhorovod loaded: (.+)$", out, re.M)  # the installed one
    assert loaded and os.path.realpath(loaded.group(1)) == os.path.join(
        os.path.realpath(site), "mxhorovod"), out
    assert "libmpi loaded: %s (from the mpich wheel)" % os.path.realpath(
        str(venv_b / "lib" / "libmpi.so.12")) in out, out

    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    out = _run([str(venv_b / "bin" / "mpirun"), "-np", "2", py_b, str(script)], 300,
               env=dict(no_cc, OMP_NUM_THREADS="1"), cwd=str(tmp_path))
    assert "RANK 0 OK" in out and "RANK 1 OK" in out, out

    # The single-process core tests, against the installed package (a copy of tests/, away
    # from the checkout, so that nothing imports the checkout's mxhorovod).
    tests = tmp_path / "tests"
    shutil.copytree(os.path.join(ROOT, "tests"), str(tests),
                    ignore=shutil.ignore_patterns("__pycache__"))
    # Not under CI's rule on skips: the mpi4py test skips here (mpi4py is an optional extra).
    inner = {k: v for k, v in no_cc.items() if k != "MXHOROVOD_CI"}
    out = _run([py_b, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                str(tests / "core" / "test_core_single.py")], 900,
               env=dict(inner, OMP_NUM_THREADS="1"), cwd=str(tmp_path))
    assert re.search(r"\d+ passed", out) and "failed" not in out, out[-3000:]
    assert "1 skipped" in out, out[-3000:]  # the mpi4py test: mpi4py is an optional extra

    # The README's docs command in a checkout whose mxhorovod/ has no built extension (a
    # clone), with this non-editable install: autodoc documents the installed package.
    _run([py_b] + pip + ["install", TESTED["sphinx"], TESTED["myst-parser"], TESTED["furo"],
                         TESTED["sphinx-argparse"]], 900, env=no_cc)
    clone = tmp_path / "clone"
    shutil.copytree(ROOT, str(clone), ignore=shutil.ignore_patterns(
        ".git", ".venv", "_build", "build", "__pycache__", "*.so", "*.egg-info", "tests"))
    _run([py_b, "-m", "sphinx", "-b", "html", "docs", "docs/_build/html"], 600,
         env=no_cc, cwd=str(clone))
    with open(clone / "docs" / "_build" / "html" / "api.html", encoding="utf-8") as f:
        api = f.read()
    assert "mxhorovod.DistributedTrainer" in api and \
        "data-parallel training over all ranks" in api, api[:2000]
