"""Scripts written for Horovod run unchanged: ``mxhorovodrun --horovod-alias`` (and the
plain mpirun form of docs/running.md) make ``import horovod.mxnet as hvd`` give mxhorovod in
the ranks, without hiding a real Horovod's other subpackages, and nothing changes without
them (mxhorovod/horovod_alias, mxhorovodrun/horovod_alias.py)."""
import os
import subprocess
import sys
import textwrap

from mxhorovod_devtools.mpirun import REPO, TESTS, run_ranks, worker_path
from support.launcher import launcher

ALIAS = os.path.join(REPO, "mxhorovod", "horovod_alias")


def _python(code, pythonpath, cwd):
    """Runs ``code`` in a fresh Python with exactly ``pythonpath``; its CompletedProcess."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_horovod_script_runs_unchanged_under_the_flag(tmp_path):
    proc = launcher(["--horovod-alias", "-np", "2", sys.executable,
                     worker_path("horovod_style.py"), str(tmp_path)], timeout=180)
    assert proc.returncode == 0, proc.stdout[-6000:]
    for r in range(2):
        assert "RANK %d OK" % r in proc.stdout, proc.stdout[-6000:]
    assert (tmp_path / "net.params").exists() and (tmp_path / "trainer.states").exists()


def test_horovod_script_under_plain_mpirun(tmp_path):
    # docs/running.md: PYTHONPATH=$(python -m mxhorovodrun.horovod_alias):$PYTHONPATH mpirun ...
    printed = subprocess.run([sys.executable, "-m", "mxhorovodrun.horovod_alias"],
                             capture_output=True, text=True, timeout=60, cwd=str(tmp_path),
                             env=dict(os.environ, PYTHONPATH=REPO), check=True).stdout
    assert printed == ALIAS + "\n"
    run_ranks(2, "horovod_style.py", [str(tmp_path)], timeout=180,
              env={"PYTHONPATH": os.pathsep.join([ALIAS, TESTS, REPO])})


def _fake_horovod(root):
    """A real Horovod's stand-in: horovod/ with __version__, runner.run, torch, and a
    horovod.mxnet that refuses to be imported."""
    pkg = root / "horovod"
    for sub in ("torch", "runner", "mxnet"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "__init__.py").write_text("from horovod.runner import run\n__version__ = '0.99.1'\n")
    (pkg / "runner" / "__init__.py").write_text("def run():\n    return 'real run'\n")
    (pkg / "torch" / "__init__.py").write_text("WHO = 'real horovod.torch'\n")
    (pkg / "mxnet" / "__init__.py").write_text("raise ImportError('the real horovod.mxnet')\n")
    return pkg


def test_the_alias_keeps_a_real_horovods_other_subpackages(tmp_path):
    real = _fake_horovod(tmp_path / "site")
    proc = _python("""
        import sys
        import horovod.torch
        assert horovod.torch.WHO == 'real horovod.torch'
        assert 'mxnet' not in sys.modules and 'mxhorovod' not in sys.modules  # torch alone
        assert horovod.mxhorovod_alias is True and horovod.__version__ == '0.99.1'
        assert horovod.real_horovod == %r, horovod.real_horovod
        assert horovod.run() == 'real run'
        import horovod.mxnet as hvd
        import horovod.mxnet.mpi_ops, horovod.mxnet.functions, horovod.mxnet.compression
        import mxhorovod
        from horovod.mxnet.mpi_ops import allreduce
        assert hvd.__file__.startswith(%r) and hvd.__version__ == mxhorovod.__version__
        assert allreduce is mxhorovod.allreduce and hvd.elastic is mxhorovod.elastic
        for name in mxhorovod.__all__:
            assert getattr(hvd, name) is getattr(mxhorovod, name), name
        for face in ('mpi_ops', 'functions', 'compression', 'elastic'):
            assert sys.modules['horovod.mxnet.' + face] is getattr(mxhorovod, face), face
            assert getattr(hvd, face) is getattr(mxhorovod, face), face
        print('ALIAS OK')
        """ % (str(real), ALIAS), [ALIAS, str(tmp_path / "site"), REPO], cwd=str(tmp_path))
    assert proc.returncode == 0 and "ALIAS OK" in proc.stdout, proc.stdout + proc.stderr


def test_the_alias_without_a_real_horovod(tmp_path):
    proc = _python("""
        import horovod
        assert horovod.mxhorovod_alias is True and horovod.real_horovod is None
        assert horovod.__version__ == '0.28.1'
        try:
            horovod.run
        except AttributeError as e:
            assert "mxhorovod's alias" in str(e) and 'none installed' in str(e), e
        else:
            raise AssertionError('horovod.run exists')
        print('ALONE OK')
        """, [ALIAS, REPO], cwd=str(tmp_path))
    assert proc.returncode == 0 and "ALONE OK" in proc.stdout, proc.stdout + proc.stderr


def test_without_the_alias_import_horovod_is_untouched(tmp_path):
    # Nothing is installed: without the folder on the path, horovod is what it was.
    code = """
        import importlib.util
        spec = importlib.util.find_spec('horovod')
        print('HOROVOD', spec.origin if spec else None)
        """
    found = _python(code, [REPO, TESTS], cwd=str(tmp_path))
    assert found.returncode == 0, found.stderr
    assert "horovod_alias" not in found.stdout, found.stdout
    real = _fake_horovod(tmp_path / "site")
    proc = _python(code + """
        try:
            import horovod.mxnet
        except ImportError as e:
            print('REAL', e)
        """, [str(tmp_path / "site"), REPO], cwd=str(tmp_path))
    assert "HOROVOD %s" % (real / "__init__.py") in proc.stdout, proc.stdout + proc.stderr
    assert "REAL the real horovod.mxnet" in proc.stdout, proc.stdout + proc.stderr
