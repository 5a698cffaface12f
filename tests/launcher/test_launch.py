"""mxhorovodrun/launch.py: main() (errors before anything starts, mpirun's exit status), the
console script and its old names, what the launcher imports (neither mxhorovod nor MXNet),
and real jobs started as a user starts them (an ssh stand-in, a killed rank)."""
import os
import re
import subprocess
import sys

import pytest

from mxhorovod_devtools.mpirun import REPO, worker_path
from mxhorovodrun.cores import usable_cores
from mxhorovodrun.launch import main
from mxhorovodrun.mpi import HYDRA, OPEN_MPI
from support.launcher import (LOG_TIME, VERSIONS, fake_mpirun, launcher, run_env_worker,
                             start_sleepers, starts)


def test_main_reports_errors_without_starting_anything(tmp_path, monkeypatch, capsys):
    started = []
    monkeypatch.setenv("MXHOROVOD_MPIRUN", str(tmp_path / "missing"))
    assert main(["-np", "2", "python", "t.py"], **starts(started)) == 1
    assert "MXHOROVOD_MPIRUN=%s is not an executable file" % (tmp_path / "missing") in capsys.readouterr().err
    monkeypatch.setenv("MXHOROVOD_MPIRUN", fake_mpirun(tmp_path, VERSIONS[HYDRA]))
    assert main(["-np", "3", "-H", "a:1,b:1", "python", "t.py"], **starts(started)) == 1
    assert "-np 3 is more than the 2 slots of a:1,b:1" in capsys.readouterr().err
    assert started == []
    assert main(["-np", "2", "--hierarchical-allreduce", "python", "t.py"],
                **starts(started)) == 0
    assert "no effect" not in capsys.readouterr().err
    path, argv, env = started[0]
    assert path == argv[0] == os.environ["MXHOROVOD_MPIRUN"] and env["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "1"


def test_console_script_declared():
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        pytest.skip("tomllib needs Python 3.11")
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["scripts"]["mxhorovodrun"] == "mxhorovodrun.launch:run_commandline"
    from mxhorovodrun.launch import run_commandline  # noqa: F401  the target exists


def _console_script():
    """What pip writes into the mxhorovodrun console script for pyproject's entry point."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        module, func = tomllib.load(f)["project"]["scripts"]["mxhorovodrun"].split(":")
    return "import sys\nfrom %s import %s\nsys.exit(%s())\n" % (module, func, func)


def _launcher_imports(form, args, env):
    """(CompletedProcess, the modules the launcher's process imported before its exec) of
    ``mxhorovodrun ARGS`` started as ``form``: the console script, or python -m."""
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    full.update(env)
    start = ["-c", _console_script()] if form == "console script" else ["-m", "mxhorovodrun"]
    proc = subprocess.run([sys.executable, "-X", "importtime"] + start + list(args), env=full,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    modules = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", proc.stderr, re.M)
    assert "mxhorovodrun.args" in modules, proc.stderr[-3000:]  # -X importtime saw the launcher
    return proc, modules


@pytest.mark.parametrize("form", ["console script", "python -m"])
@pytest.mark.parametrize("flavour", [OPEN_MPI, HYDRA])
def test_launcher_imports_neither_mxhorovod_nor_mxnet(tmp_path, form, flavour):
    # The launcher imported the mxhorovod package, and with it MXNet and the extension:
    # about 1.5 s (and 220 MB) before each job started, where mpirun takes 50 ms. It needs
    # neither: flags, hosts, the environment and mpirun's command line are the standard
    # library's work (Open MPI: it execs mpirun; hydra: it execs the output relay).
    proc, modules = _launcher_imports(
        form, ["-np", "2", "--cycle-time-ms", "3", "python", "t.py"],
        {"MXHOROVOD_MPIRUN": fake_mpirun(tmp_path, VERSIONS[flavour]), "FAKE_EXIT": "3"})
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    assert "ENV HOROVOD_CYCLE_TIME=3" in proc.stdout, proc.stdout
    heavy = [m for m in modules if m.split(".")[0] in ("mxnet", "mxhorovod", "numpy")]
    assert not heavy, heavy


def test_version_without_importing_mxnet():
    import mxhorovod
    for form in ("console script", "python -m"):
        proc, modules = _launcher_imports(form, ["--version"], {})
        assert proc.returncode == 0 and proc.stdout == mxhorovod.__version__ + "\n", proc
        assert not [m for m in modules if m.split(".")[0] in ("mxnet", "mxhorovod")]


def test_old_names_are_the_launcher(tmp_path):
    # mxhorovod.runner (and python -m mxhorovod.runner) was the launcher's home: its modules
    # are the very modules of mxhorovodrun (a monkeypatch through either reaches both).
    import mxhorovod.runner
    import mxhorovodrun
    from mxhorovod.runner import output
    from mxhorovod.runner.launch import main as old_main
    assert old_main is main and output is sys.modules["mxhorovodrun.output"]
    assert mxhorovod.runner.run_commandline is mxhorovodrun.run_commandline
    for name in ("args", "check_build", "hosts", "launch", "mpi", "output", "settings",
                 "startup"):
        assert sys.modules["mxhorovod.runner." + name] is sys.modules["mxhorovodrun." + name]
    fake = fake_mpirun(tmp_path, VERSIONS[OPEN_MPI])
    full = dict(os.environ, MXHOROVOD_MPIRUN=fake, FAKE_EXIT="5")
    full["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, "-m", "mxhorovod.runner", "-np", "2", "python", "t.py"],
                          env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    assert proc.returncode == 5 and re.search(r"^ARGV .*-np 2 .*python t\.py$", proc.stdout, re.M), \
        proc.stdout


def test_cli_exit_status_is_mpiruns(tmp_path):
    fake = fake_mpirun(tmp_path, VERSIONS[OPEN_MPI])
    proc = launcher(["-np", "2", "--cache-capacity", "7", "python", "t.py"],
                    env={"MXHOROVOD_MPIRUN": fake, "FAKE_EXIT": "7", "OMP_NUM_THREADS": ""})
    assert proc.returncode == 7, proc.stdout
    assert re.search(r"^ARGV .*-np 2 -H localhost:2 .*-x HOROVOD_CACHE_CAPACITY .*python t\.py$",
                     proc.stdout, re.M), proc.stdout
    assert "ENV HOROVOD_CACHE_CAPACITY=7" in proc.stdout
    # OMP_NUM_THREADS was empty: set from the usable cores of this machine for 2 ranks.
    cores = usable_cores()
    assert "ENV OMP_NUM_THREADS=%d" % max(1, cores // 2) in proc.stdout


def test_end_to_end_through_an_ssh_stand_in(tmp_path):
    # Two "hosts" reached through a stand-in for ssh (as the network-namespace tests do):
    # it logs how hydra called it and, like ssh, runs the command here with a bare login
    # environment. A site's HYDRA_ENV=none in the launching environment would then leave the
    # ranks without it; -genvall still gives them all of it. Every rank must start and work.
    log = tmp_path / "standin.log"
    standin = tmp_path / "standin.sh"
    standin.write_text('#!/bin/bash\necho "$*" >> %s\n'
                       'while [[ "$1" == -* ]]; do [[ "$1" == -p || "$1" == -i ]] && shift; shift; done\n'
                       'shift\nexec env -i HOME="$HOME" PATH=/usr/bin:/bin bash -c "$*"\n' % log)
    standin.chmod(0o755)
    want = {"size": 3, "init_error": None, "guard": True,
            "env": {"HOROVOD_CACHE_CAPACITY": "8", "FOO": "bar", "HYDRA_ENV": "none"}}
    run_env_worker(["-H", "fakehost1:1,fakehost2:2", "-p", "2222", "--ssh-command", str(standin),
                     "--cache-capacity", "8"], want, np_=3,
                    env={"FOO": "bar", "HYDRA_ENV": "none", "MXHOROVOD_RANK_GUARD": ""})
    calls = log.read_text().splitlines()
    hosts = sorted(re.match(r"^(?:-x )?-p 2222 (fakehost\d) ", c).group(1) for c in calls)
    assert hosts == ["fakehost1", "fakehost2"], calls


def test_end_to_end_killed_rank_ends_the_job():
    # Rank 1 dies by SIGKILL after 3 allreduces; mpirun (mxhorovodrun's child) ends the
    # other rank and exits non-zero, long before the survivor's 60 s would run out. Its
    # rank guard names it (MPICH's banner names a pid, not always the killed rank's).
    proc = launcher(["-np", "2", sys.executable, worker_path("multihost_kill.py"), "1"],
                    timeout=120)
    assert "RANK 1 KILLS ITSELF" in proc.stdout, proc.stdout[-3000:]
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "SURVIVED" not in proc.stdout, proc.stdout[-3000:]
    assert re.search(r"^\[1\] \[1\]<error> %s mxhorovod: rank 1 \(pid \d+ on \S+\) was killed by "
                     r"SIGKILL \(signal 9\); mpirun ends the job$" % LOG_TIME, proc.stdout, re.M), \
        proc.stdout[-3000:]


def test_end_to_end_the_launcher_holds_no_mxnet_while_the_job_runs(tmp_path):
    # The launcher imports mxhorovod (and MXNet: ~220 MB); as the relay's process it lived
    # as long as the job with all of it. It now execs a Python that runs the relay alone.
    proc, _ = start_sleepers(tmp_path)
    try:
        with open("/proc/%d/maps" % proc.pid) as f:
            maps = f.read()
        with open("/proc/%d/cmdline" % proc.pid, "rb") as f:
            argv = f.read().decode().split("\0")
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert argv[1:3] == ["-I", os.path.join(REPO, "mxhorovodrun", "output.py")], argv
    assert "libmxnet" not in maps and "_core" not in maps
    assert proc.returncode != 0, out[-3000:]  # SIGTERM, forwarded to mpirun, ended the job
