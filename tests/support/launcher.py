"""Helpers of the launcher's tests (tests/launcher/): a fake mpirun of each MPI that prints its
version, or its arguments and the launcher's variables; what mxhorovodrun would exec with
it (:func:`plan`); the real launcher run as a user runs it (:func:`launcher`), with a
worker that checks its environment (:func:`run_env_worker`) or ranks that sleep
(:func:`start_sleepers`)."""
import json
import os
import signal
import subprocess
import sys

from mxhorovod_devtools.mpirun import REPO, TESTS, as_from_a_terminal, worker_path
from mxhorovodrun.args import parse_args
from mxhorovodrun.launch import prepare
from mxhorovodrun.mpi import HYDRA, INTEL_MPI, OPEN_MPI


# What mxhorovodrun puts in front of every rank's command (the rank guard, by default).
GUARD_PATH = os.path.join(REPO, "mxhorovod", "rank_guard.py")
GUARDED = [sys.executable, "-I", "-S", GUARD_PATH]
LOG_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}"  # the time in mxhorovod's log lines


VERSIONS = {
    # The mpich 5 wheel's hydra: no "MPICH" anywhere (horovodrun 0.28.1 rejects it).
    HYDRA: "HYDRA build details:\n    Version:                                 5.0.2\n"
           "    Release Date:                            unreleased development copy\n"
           "    Launchers available:                     ssh rsh fork slurm ll lsf sge manual persist\n",
    OPEN_MPI: "mpirun (Open MPI) 4.1.2\n\nReport bugs to http://www.open-mpi.org/community/help/\n",
    INTEL_MPI: "Intel(R) MPI Library for Linux* OS, Version 2021.6 Build 20220227 (id: 28877f3f32)\n"
               "Copyright 2003-2022, Intel Corporation.\n",
}


# Prints its version, or its arguments and the launcher's variables, then exits with
# $FAKE_EXIT: stands in for mpirun wherever its own behaviour is not what is tested.
FAKE = """#!/bin/sh
if [ "$1" = "--version" ] && [ -n "$FAKE_VERSION_SLEEP" ]; then exec sleep "$FAKE_VERSION_SLEEP"; fi
if [ "$1" = "--version" ]; then cat "$(dirname "$0")/version.txt"; exit ${FAKE_VERSION_EXIT:-0}; fi
echo "ARGV $*"
env | grep -E '^(HOROVOD_|OMP_NUM_THREADS=|HYDRA_|NCCL_|FOO=)' | sort | sed 's/^/ENV /'
exit ${FAKE_EXIT:-0}
"""


def fake_mpirun(tmp_path, version):
    d = tmp_path / "fakempi"
    d.mkdir(exist_ok=True)
    (d / "version.txt").write_text(version)
    path = d / "mpirun"
    path.write_text(FAKE)
    path.chmod(0o755)
    return str(path)


def plan(tmp_path, flavour, argv, cores=8, environ=None, capture_dir="/cap"):
    """(argv, env, notes) that mxhorovodrun would exec with a fake mpirun of flavour."""
    env = {"PATH": "/usr/bin:/bin", "MXHOROVOD_MPIRUN": fake_mpirun(tmp_path, VERSIONS[flavour])}
    env.update(environ or {})
    mpi, cmd, out_env, notes = prepare(parse_args(argv, environ=env), environ=env, cores=cores,
                                       capture_dir=capture_dir)
    assert mpi.flavour == flavour
    return cmd, out_env, notes


def launcher(args, env=None, timeout=240, stdin_text=None):
    """Runs python -m mxhorovodrun ARGS; returns the CompletedProcess (output merged).
    ``stdin_text``: the launcher's standard input (default: this process's)."""
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([REPO, TESTS] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    full.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
    full.update(env or {})
    cmd = [sys.executable, "-m", "mxhorovodrun"] + list(args)
    proc = subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True,
                            stdin=None if stdin_text is None else subprocess.PIPE,
                            preexec_fn=as_from_a_terminal)
    try:
        out, _ = proc.communicate(stdin_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("timed out after %ss: %s\n%s" % (timeout, cmd, out[-6000:]))
    return subprocess.CompletedProcess(cmd, proc.returncode, out)


def starts(started):
    """main()'s two ways of starting mpirun, recording (path, argv, env) in ``started``
    instead: exec (Open MPI) and the output relay's child (hydra, Intel MPI)."""
    class Finished:
        def wait(self):
            return 0

        def poll(self):
            return 0

        def send_signal(self, signum):
            pass

    def popen(argv, env=None, **_options):
        started.append((argv[0], argv, env))
        return Finished()
    return dict(execve=lambda *a: started.append(a), popen=popen)


def run_env_worker(args, want, np_=2, env=None):
    proc = launcher(args + ["-np", str(np_), sys.executable, worker_path("settings_env.py"),
                            json.dumps(want)], env=env)
    assert proc.returncode == 0, proc.stdout[-6000:]
    for r in range(np_):
        assert "RANK %d OK" % r in proc.stdout, proc.stdout[-6000:]
    return proc


def wait_for_files(paths, timeout=90):
    import time
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(p) and os.path.getsize(p) for p in paths):
        assert time.monotonic() < deadline, "not all of %s appeared" % paths
        time.sleep(0.1)
    return [int(open(p).read()) for p in paths]


# Each rank writes its pid to DIR/pid.<rank> and sleeps; a Ctrl-C lets it clean up (1 s)
# and exit 0, saying so.
SLEEPER = ('import os, sys, time; r = os.environ["PMI_RANK"]; d = sys.argv[1]\n'
            'open(os.path.join(d, "pid." + r + ".tmp"), "w").write(str(os.getpid()))\n'
            'os.rename(os.path.join(d, "pid." + r + ".tmp"), os.path.join(d, "pid." + r))\n'
            'try:\n'
            '    time.sleep(120)\n'
            'except KeyboardInterrupt:\n'
            '    print("rank", r, "cleaning up", flush=True); time.sleep(1)\n'
            '    print("rank", r, "cleaned up", flush=True)\n')


def start_sleepers(tmp_path):
    full = dict(os.environ, OMP_NUM_THREADS="1")
    full["PYTHONPATH"] = os.pathsep.join([REPO, TESTS] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.Popen([sys.executable, "-m", "mxhorovodrun", "-np", "2", sys.executable,
                             "-c", SLEEPER, str(tmp_path)], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    try:
        pids = wait_for_files([str(tmp_path / ("pid.%d" % r)) for r in range(2)])
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc, pids
