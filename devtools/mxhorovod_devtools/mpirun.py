"""Run a Python worker script on N ranks under the venv's mpirun, with a timeout.

Multi-rank tests call :func:`run_ranks`; the worker asserts values on its own rank and
prints ``RANK <r> OK`` at the end, which :func:`run_ranks` checks for every rank, so a rank
that dies, hangs or skips its checks fails the test.
"""
import glob
import os
import shutil
import signal
import subprocess
import sys

from mxhorovod_devtools import hang_report

# The checkout this package lies in (installed editable), and its tests.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(REPO, "tests")


def as_from_a_terminal():
    """preexec_fn of the launchers and guards the tests start: the signals a shell's
    foreground job has (a run in the background, as `bash .ci/run &`, starts with SIGINT
    ignored, which the launcher and the rank guard leave ignored, as asked)."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def process_gone(pid):
    """Whether process ``pid`` has ended (a zombie counts as ended)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def mpirun_path():
    """The mpirun next to this Python (the venv's mpich wheel), else the one on PATH."""
    cand = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if os.path.exists(cand):
        return cand
    found = shutil.which("mpirun")
    if not found:
        raise RuntimeError("mpirun not found: pip install mpich")
    return found


def worker_path(script):
    """``script`` if absolute, else the worker of that name: the one file
    tests/<concern>/workers/<script> (worker names are unique across the folders)."""
    if os.path.isabs(script):
        return script
    found = glob.glob(os.path.join(TESTS, "*", "workers", script))
    if len(found) != 1:
        raise FileNotFoundError("worker %r: %s under %s/*/workers/" % (
            script, "found as " + ", ".join(found) if found else "not found", TESTS))
    return found[0]


def worker_env(env=None):
    """The environment of every rank: one OpenMP and one MXNet worker thread unless set,
    tests/ (the workers' shared modules: the ``support`` package) and this checkout on
    PYTHONPATH, then ``env`` on top. The checkout: the ranks test the mxhorovod beside
    these tests, as pytest's own process does, even where the venv's editable install
    points at another checkout."""
    full_env = dict(os.environ)
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
    full_env["PYTHONPATH"] = os.pathsep.join(
        [TESTS, REPO] + [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p])
    full_env.update(env or {})
    return full_env


def run_ranks(np, script, args=(), timeout=180, env=None, expect_ok=True, prefix=(), outer=()):
    """Run ``python script args`` on ``np`` ranks; return the CompletedProcess.

    ``script`` is a path, or a worker's file name (:func:`worker_path`). With
    ``expect_ok`` the run must exit 0 and every rank must have printed ``RANK <r> OK``. A
    run longer than ``timeout`` seconds is killed and fails the test (a hang must never
    stall CI).
    ``prefix``: words put before ``python`` on every rank (a wrapper command); ``outer``:
    words put before ``mpirun`` (a wrapper of the whole job).
    """
    script = worker_path(script)
    full_env = worker_env(env)
    cmd = list(outer) + [mpirun_path(), "-np", str(np)] + list(prefix) + [sys.executable, script] + [str(a) for a in args]
    proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # What every process waited in, then kill mpirun's process group: hydra's proxy,
        # in a session of its own, ends every rank when mpirun dies. Never leave a rank.
        stacks = hang_report.report(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("timed out after %ss: %s\n%s\nthe job's processes when it "
                             "timed out:\n%s" % (timeout, " ".join(cmd), out[-6000:], stacks))
    proc.stdout = out
    if expect_ok:
        assert proc.returncode == 0, "exit %d\n%s" % (proc.returncode, proc.stdout[-8000:])
        for r in range(np):
            assert "RANK %d OK" % r in proc.stdout, "rank %d did not finish\n%s" % (r, proc.stdout[-8000:])
    return proc
