"""mxhorovodrun (python -m mxhorovod.runner): command lines for each MPI against a fake
mpirun that prints its version, the HOROVOD_* variables of the flags, OMP_NUM_THREADS,
errors, --check-build, and real runs under the venv's mpirun asserting on every rank."""
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from mpirun import HERE, WORKERS
from mxhorovod.runner import hosts as hostlib
from mxhorovod.runner.args import parse_args
from mxhorovod.runner.launch import main, prepare
from mxhorovod.runner.mpi import (HYDRA, INTEL_MPI, OPEN_MPI, LaunchError, classify, detect,
                                  find_mpirun)

REPO = os.path.dirname(HERE)

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


def plan(tmp_path, flavour, argv, cores=8, environ=None):
    """(argv, env, notes) that mxhorovodrun would exec with a fake mpirun of flavour."""
    env = {"PATH": "/usr/bin:/bin", "MXHOROVOD_MPIRUN": fake_mpirun(tmp_path, VERSIONS[flavour])}
    env.update(environ or {})
    mpi, cmd, out_env, notes = prepare(parse_args(argv), environ=env, cores=cores)
    assert mpi.flavour == flavour
    return cmd, out_env, notes


def launcher(args, env=None, timeout=240):
    """Runs python -m mxhorovod.runner ARGS; returns the CompletedProcess (output merged)."""
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    full.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
    full.update(env or {})
    cmd = [sys.executable, "-m", "mxhorovod.runner"] + list(args)
    proc = subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("timed out after %ss: %s\n%s" % (timeout, cmd, out[-6000:]))
    return subprocess.CompletedProcess(cmd, proc.returncode, out)


# --- telling the MPIs apart -----------------------------------------------------------

def test_classify_versions():
    assert classify(VERSIONS[HYDRA]) == (HYDRA, "5.0.2")
    assert classify(VERSIONS[OPEN_MPI]) == (OPEN_MPI, "4.1.2")
    assert classify(VERSIONS[INTEL_MPI]) == (INTEL_MPI, "2021.6")
    assert classify("mpiexec (OpenRTE) 2.1.1\n")[0] == OPEN_MPI
    assert classify("MPICH Version: 3.3a2\n")[0] == HYDRA
    assert classify("FooMPI 1.0\n") == (None, "")


def test_detects_the_venv_mpich_wheel():
    mpi = detect(find_mpirun())
    assert mpi.flavour == HYDRA and mpi.version
    assert mpi.path == os.path.join(os.path.dirname(sys.executable), "mpirun")


def test_unknown_or_broken_mpirun(tmp_path, monkeypatch):
    with pytest.raises(LaunchError, match="(?s)unknown MPI implementation.*FooMPI 1.0"):
        detect(fake_mpirun(tmp_path, "FooMPI 1.0\n"))
    monkeypatch.setenv("FAKE_VERSION_EXIT", "3")
    with pytest.raises(LaunchError, match=r"--version failed \(exit 3\)"):
        detect(fake_mpirun(tmp_path, VERSIONS[HYDRA]))


def test_find_mpirun_order(tmp_path):
    beside = tmp_path / "venv" / "bin"
    beside.mkdir(parents=True)
    on_path = tmp_path / "path"
    on_path.mkdir()
    for d in (beside, on_path):
        (d / "mpirun").write_text("#!/bin/sh\n")
        (d / "mpirun").chmod(0o755)
    python = str(beside / "python")
    env = {"PATH": str(on_path)}
    assert find_mpirun(env, python) == str(beside / "mpirun")
    assert find_mpirun(env, str(tmp_path / "python")) == str(on_path / "mpirun")
    explicit = fake_mpirun(tmp_path, "x")
    assert find_mpirun(dict(env, MXHOROVOD_MPIRUN=explicit), python) == explicit


def test_missing_mpirun_message(tmp_path):
    with pytest.raises(LaunchError) as e:
        find_mpirun({"PATH": str(tmp_path)}, str(tmp_path / "python"))
    assert "mpirun not found" in str(e.value) and "pip install mpich" in str(e.value)
    with pytest.raises(LaunchError, match="MXHOROVOD_MPIRUN=/nonexistent/mpirun is not an executable"):
        find_mpirun({"MXHOROVOD_MPIRUN": "/nonexistent/mpirun"}, sys.executable)


# --- command lines ----------------------------------------------------------------------

def test_hydra_command_line(tmp_path):
    cmd, env, notes = plan(tmp_path, HYDRA, ["-np", "4", "-H", "h1:2,h2:2", "-p", "2222",
                                             "-i", "/k/id", "--ssh-command", "/bin/standin",
                                             "--network-interfaces", "br0",
                                             "--mpi-args=-genv FOO 1", "python", "train.py", "--lr", "0.1"])
    assert cmd[1:] == ["-l", "-np", "4", "-hosts", "h1:2,h2:2", "-bind-to", "none", "-map-by", "slot",
                       "-genvall", "-launcher", "ssh", "-launcher-exec", "/bin/standin", "-iface", "br0",
                       "-genv", "FOO", "1", "python", "train.py", "--lr", "0.1"]
    # hydra passes the whole environment (-genvall): no -genv per variable; ssh's options
    # by variable.
    assert env["HYDRA_LAUNCHER_EXTRA_ARGS"] == "-p 2222 -i /k/id"
    assert env["NCCL_SOCKET_IFNAME"] == "br0" and notes == []


def test_hydra_local_and_hostfile(tmp_path):
    cmd, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "python", "t.py"])
    assert cmd[1:] == ["-l", "-np", "2", "-bind-to", "none", "-map-by", "slot", "-genvall",
                       "python", "t.py"]
    assert "HYDRA_LAUNCHER_EXTRA_ARGS" not in env
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1 slots=2\n\nnode2:3\nnode3\n")
    cmd, _, _ = plan(tmp_path, HYDRA, ["-np", "6", "--hostfile", str(hostfile), "python", "t.py"])
    assert cmd[cmd.index("-hosts") + 1] == "node1:2,node2:3,node3:1"


def test_hydra_takes_one_interface(tmp_path):
    cmd, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--network-interfaces", "eth1,eth0",
                                             "--network-interface", "ib0", "python", "t.py"])
    assert cmd[cmd.index("-iface") + 1] == "eth0"
    assert env["NCCL_SOCKET_IFNAME"] == "eth0,eth1,ib0"
    assert notes == ["MPICH (hydra) takes one network interface: using eth0, not eth1, ib0"]


def test_open_mpi_command_line(tmp_path):
    cmd, env, _ = plan(tmp_path, OPEN_MPI, ["-np", "3", "-H", "a:2,b:1", "-p", "22",
                                            "--ssh-command", "/bin/standin",
                                            "--network-interfaces", "eth0,eth1",
                                            "--cycle-time-ms", "5", "python", "t.py"],
                       environ={"FOO": "bar", "BASH_FUNC_x%%": "() {", "OLDPWD": "/"})
    head = cmd[:cmd.index("-x")]
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    assert head[1:] == root + ["--tag-output", "-np", "3", "-H", "a:2,b:1",
                               "--bind-to", "none", "--map-by", "slot",
                               "-mca", "plm_rsh_agent", "/bin/standin",
                               "-mca", "plm_rsh_args", "-p 22",
                               "-mca", "btl_tcp_if_include", "eth0,eth1"]
    exported = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"]
    for name in ("FOO", "PATH", "HOROVOD_CYCLE_TIME", "OMP_NUM_THREADS", "NCCL_SOCKET_IFNAME"):
        assert name in exported
    assert "OLDPWD" not in exported and not any(n.startswith("BASH_FUNC") for n in exported)
    assert exported == sorted(exported)
    assert cmd[-2:] == ["python", "t.py"]


def test_open_mpi_root_flag_and_local_hosts(tmp_path):
    from mxhorovod.runner.mpi import MPI, mpirun_command
    mpi = MPI("/x/mpirun", OPEN_MPI, "4.1")
    cmd, _, _ = mpirun_command(mpi, 2, ["python"], is_root=False)
    assert "--allow-run-as-root" not in cmd and cmd[cmd.index("-H") + 1] == "localhost:2"
    cmd, _, _ = mpirun_command(mpi, 2, ["python"], is_root=True)
    assert cmd[1] == "--allow-run-as-root"


def test_intel_mpi_command_line(tmp_path):
    cmd, env, _ = plan(tmp_path, INTEL_MPI, ["-np", "4", "-H", "h1:2,h2:2", "-p", "2222",
                                             "--ssh-command", "/bin/standin", "python", "t.py"])
    assert cmd[1:] == ["-l", "-np", "4", "-hosts", "h1,h2", "-ppn", "2", "-genvall", "-bootstrap", "ssh",
                       "-bootstrap-exec", "/bin/standin", "-bootstrap-exec-args", "-p 2222",
                       "python", "t.py"]
    with pytest.raises(LaunchError, match="one number of processes per host.*h1:2,h2:1"):
        plan(tmp_path, INTEL_MPI, ["-np", "3", "-H", "h1:2,h2:1", "python", "t.py"])


@pytest.mark.parametrize("flavour", [HYDRA, INTEL_MPI])
def test_environment_choice_in_mpi_args_replaces_genvall(tmp_path, flavour):
    # hydra refuses a second choice ("duplicate setting: genvall"): the user's one wins.
    for choice in ("-genvnone", "-genvlist PATH,FOO", "-genvall"):
        cmd, _, _ = plan(tmp_path, flavour, ["-np", "2", "--mpi-args=%s" % choice, "python", "t.py"])
        assert cmd.count("-genvall") == (choice == "-genvall"), (choice, cmd)
        assert cmd[-2 - len(choice.split()):-2] == choice.split()


def test_ssh_command_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MXHOROVOD_SSH_COMMAND", "/opt/netns-ssh")
    cmd, _, _ = plan(tmp_path, HYDRA, ["-np", "2", "-H", "h1,h2", "python", "t.py"])
    assert cmd[cmd.index("-launcher-exec") + 1] == "/opt/netns-ssh"
    assert cmd[cmd.index("-hosts") + 1] == "h1:1,h2:1"


# --- environment from the flags ---------------------------------------------------------

def test_horovod_variables_from_flags(tmp_path):
    _, env, notes = plan(tmp_path, HYDRA, [
        "-np", "2", "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5",
        "--cache-capacity", "0", "--timeline-filename", "/tmp/tl.json", "--timeline-mark-cycles",
        "--no-stall-check", "--stall-check-warning-time-seconds", "30",
        "--stall-check-shutdown-time-seconds", "90", "--log-level", "DEBUG",
        "--log-without-timestamp", "--hierarchical-allreduce", "--autotune",
        "--autotune-log-file", "/tmp/at.csv", "--autotune-warmup-samples", "2",
        "--autotune-steps-per-sample", "5", "--autotune-bayes-opt-max-samples", "9",
        "-x", "FOO=bar baz", "python", "t.py"])
    want = {"HOROVOD_FUSION_THRESHOLD": "33554432", "HOROVOD_CYCLE_TIME": "2.5",
            "HOROVOD_CACHE_CAPACITY": "0", "HOROVOD_TIMELINE": "/tmp/tl.json",
            "HOROVOD_TIMELINE_MARK_CYCLES": "1", "HOROVOD_STALL_CHECK_DISABLE": "1",
            "HOROVOD_STALL_CHECK_TIME_SECONDS": "30", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "90",
            "HOROVOD_LOG_LEVEL": "DEBUG", "HOROVOD_LOG_HIDE_TIME": "1",
            "HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "HOROVOD_AUTOTUNE": "1",
            "HOROVOD_AUTOTUNE_LOG": "/tmp/at.csv", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "2",
            "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "5", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "9",
            "FOO": "bar baz"}
    assert {k: env.get(k) for k in want} == want
    # Flags this build does not act on are named, not silently accepted.
    assert len(notes) == 1, notes
    assert "--autotune-bayes-opt-max-samples" in notes[0] and "grid search" in notes[0]
    # Autotune's details without --autotune set nothing (horovodrun's rule).
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "--autotune-log-file", "x.csv", "python", "t.py"])
    assert "HOROVOD_AUTOTUNE_LOG" not in env and "HOROVOD_AUTOTUNE" not in env
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--no-hierarchical-allreduce", "python", "t.py"])
    assert env["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "0" and notes == []


def test_unset_flags_keep_the_environment(tmp_path):
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "python", "t.py"],
                         environ={"HOROVOD_CYCLE_TIME": "7"})
    assert env["HOROVOD_CYCLE_TIME"] == "7"
    assert not [k for k in env if k.startswith("HOROVOD_") and k != "HOROVOD_CYCLE_TIME"]
    assert notes == []
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "--cycle-time-ms", "3", "python", "t.py"],
                     environ={"HOROVOD_CYCLE_TIME": "7"})
    assert env["HOROVOD_CYCLE_TIME"] == "3.0"
    # --timeline-mark-cycles alone (no file) sets nothing, as in horovodrun.
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "--timeline-mark-cycles", "python", "t.py"])
    assert "HOROVOD_TIMELINE_MARK_CYCLES" not in env


@pytest.mark.parametrize("argv,cores,want", [
    (["-np", "4"], 8, "2"),               # 4 local ranks share 8 cores
    (["-np", "3"], 8, "2"),               # rounded down
    (["-np", "4"], 2, "1"),               # never below 1
    (["-np", "1"], 16, "16"),
    (["-np", "3", "-H", "a:2,b:2"], 8, "4"),   # at most 2 ranks on a host
    (["-np", "5", "-H", "a:4,b:4"], 8, "2"),   # a gets 4 of the 5
])
def test_omp_num_threads_rule(tmp_path, argv, cores, want):
    _, env, _ = plan(tmp_path, HYDRA, argv + ["python", "t.py"], cores=cores)
    assert env["OMP_NUM_THREADS"] == want


def test_omp_num_threads_set_by_user_is_kept(tmp_path):
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "4", "python", "t.py"], cores=8,
                     environ={"OMP_NUM_THREADS": "3"})
    assert env["OMP_NUM_THREADS"] == "3"


# --- bad input ------------------------------------------------------------------------

@pytest.mark.parametrize("argv,message", [
    (["python", "t.py"], "-np/--num-proc is required"),
    (["-np", "2"], "no command to run"),
    (["-np", "0", "python"], "must be >= 1"),
    (["-np", "2", "--fusion-threshold-mb", "-1", "python"], "must be >= 0"),
    (["-np", "2", "--cycle-time-ms", "fast", "python"], "is not a number"),
    (["-np", "2", "--log-level", "LOUD", "python"], "invalid choice"),
    (["-np", "2", "--gloo", "python"], "no Gloo controller"),
    (["-np", "2", "-H", "a:1", "--hostfile", "f", "python"], "not allowed with"),
    (["-np", "2", "-x", "1BAD=2", "python"], "not an environment variable name"),
])
def test_bad_flags(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("text,message", [
    ("a:2,,b:1", "empty entry"),
    ("a:x", "must be an integer"),
    ("a:0", "at least 1"),
    ("a b:1", "not a host name"),
    ("a:1,a:2", "listed twice"),
])
def test_bad_hosts(text, message):
    with pytest.raises(ValueError, match=message):
        hostlib.parse_hosts(text)


def test_bad_hostfile_and_too_few_slots(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("node1 slots=2\nnode2 cpus=4\n")
    with pytest.raises(ValueError, match=r"line 2 \('node2 cpus=4'\)"):
        hostlib.parse_hostfile(str(f))
    with pytest.raises(ValueError, match="No such file"):
        hostlib.parse_hostfile(str(tmp_path / "missing"))
    f.write_text("# nothing\n")
    with pytest.raises(ValueError, match="names no host"):
        hostlib.parse_hostfile(str(f))
    with pytest.raises(ValueError, match="-np 5 is more than the 4 slots of a:2,b:2"):
        hostlib.assign_ranks([("a", 2), ("b", 2)], 5)
    assert hostlib.assign_ranks([("a", 2), ("b", 2)], 3) == [("a", 2), ("b", 1)]


def test_main_reports_errors_without_starting_anything(tmp_path, monkeypatch, capsys):
    started = []
    monkeypatch.setenv("MXHOROVOD_MPIRUN", str(tmp_path / "missing"))
    assert main(["-np", "2", "python", "t.py"], execve=lambda *a: started.append(a)) == 1
    assert "MXHOROVOD_MPIRUN=%s is not an executable file" % (tmp_path / "missing") in capsys.readouterr().err
    monkeypatch.setenv("MXHOROVOD_MPIRUN", fake_mpirun(tmp_path, VERSIONS[HYDRA]))
    assert main(["-np", "3", "-H", "a:1,b:1", "python", "t.py"], execve=lambda *a: started.append(a)) == 1
    assert "-np 3 is more than the 2 slots of a:1,b:1" in capsys.readouterr().err
    assert started == []
    assert main(["-np", "2", "--hierarchical-allreduce", "python", "t.py"],
                execve=lambda *a: started.append(a)) == 0
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
    assert project["scripts"]["mxhorovodrun"] == "mxhorovod.runner.launch:run_commandline"
    from mxhorovod.runner.launch import run_commandline  # noqa: F401  the target exists


# --- the real launcher, as a user runs it -------------------------------------------------

def test_cli_exit_status_is_mpiruns(tmp_path):
    fake = fake_mpirun(tmp_path, VERSIONS[OPEN_MPI])
    proc = launcher(["-np", "2", "--cache-capacity", "7", "python", "t.py"],
                    env={"MXHOROVOD_MPIRUN": fake, "FAKE_EXIT": "7", "OMP_NUM_THREADS": ""})
    assert proc.returncode == 7, proc.stdout
    assert re.search(r"^ARGV .*-np 2 -H localhost:2 .*-x HOROVOD_CACHE_CAPACITY .*python t\.py$",
                     proc.stdout, re.M), proc.stdout
    assert "ENV HOROVOD_CACHE_CAPACITY=7" in proc.stdout
    # OMP_NUM_THREADS was empty: set from the cores of this machine for 2 ranks.
    cores = len(os.sched_getaffinity(0))
    assert "ENV OMP_NUM_THREADS=%d" % max(1, cores // 2) in proc.stdout


def test_cli_missing_mpirun_and_check_build(tmp_path):
    proc = launcher(["-np", "2", "python", "t.py"], env={"MXHOROVOD_MPIRUN": str(tmp_path / "none")})
    assert proc.returncode == 1
    assert "mxhorovodrun: error: MXHOROVOD_MPIRUN=%s is not an executable file" % (tmp_path / "none") \
        in proc.stdout
    proc = launcher(["--check-build"])
    assert proc.returncode == 0, proc.stdout
    import mxnet
    for line in ("Available Frameworks:", "[X] MXNet", "Available Controllers:", "[X] MPI",
                 "[ ] Gloo", "Available Tensor Operations:", "[ ] NCCL", "[ ] DDL", "[ ] CCL",
                 "MXNet: built against %s, running %s" % (mxnet.__version__, mxnet.__version__),
                 "MPI launcher: MPICH (hydra) ", "Features:", "[X] CPU tensors"):
        assert line in proc.stdout, (line, proc.stdout)


def _run_env_worker(args, want, np_=2, env=None):
    proc = launcher(args + ["-np", str(np_), sys.executable, os.path.join(WORKERS, "runner_env.py"),
                            json.dumps(want)], env=env)
    assert proc.returncode == 0, proc.stdout[-6000:]
    for r in range(np_):
        assert "RANK %d OK" % r in proc.stdout, proc.stdout[-6000:]
    return proc


def test_end_to_end_settings_reach_every_rank():
    want = {"size": 2, "init_error": None, "env": {
        "HOROVOD_FUSION_THRESHOLD": str(4 * 1024 * 1024), "HOROVOD_CYCLE_TIME": "2.0",
        "HOROVOD_CACHE_CAPACITY": "16", "HOROVOD_STALL_CHECK_DISABLE": "1",
        "HOROVOD_STALL_CHECK_TIME_SECONDS": "30", "HOROVOD_LOG_LEVEL": "INFO",
        "OMP_NUM_THREADS": str(max(1, len(os.sched_getaffinity(0)) // 2)), "FOO": "bar"}}
    _run_env_worker(["--fusion-threshold-mb", "4", "--cycle-time-ms", "2", "--cache-capacity", "16",
                     "--no-stall-check", "--stall-check-warning-time-seconds", "30",
                     "--log-level", "INFO", "-x", "FOO=bar"], want, env={"OMP_NUM_THREADS": ""})


def test_end_to_end_core_reads_the_flag():
    # The core refuses a cycle time above a minute: its error on every rank proves that
    # --cycle-time-ms reached it.
    want = {"size": 2, "init_error": "HOROVOD_CYCLE_TIME=70000", "env": {"HOROVOD_CYCLE_TIME": "70000.0"}}
    _run_env_worker(["--cycle-time-ms", "70000"], want)


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
    want = {"size": 3, "init_error": None, "env": {"HOROVOD_CACHE_CAPACITY": "8", "FOO": "bar",
                                                    "HYDRA_ENV": "none"}}
    _run_env_worker(["-H", "fakehost1:1,fakehost2:2", "-p", "2222", "--ssh-command", str(standin),
                     "--cache-capacity", "8"], want, np_=3, env={"FOO": "bar", "HYDRA_ENV": "none"})
    calls = log.read_text().splitlines()
    hosts = sorted(re.match(r"^(?:-x )?-p 2222 (fakehost\d) ", c).group(1) for c in calls)
    assert hosts == ["fakehost1", "fakehost2"], calls


def test_end_to_end_killed_rank_ends_the_job():
    # Rank 1 dies by SIGKILL after 3 allreduces; mpirun (which mxhorovodrun became) ends the
    # other rank and exits non-zero, long before the survivor's 60 s would run out.
    proc = launcher(["-np", "2", sys.executable, os.path.join(WORKERS, "multihost_kill.py"), "1"],
                    timeout=120)
    assert "RANK 1 KILLS ITSELF" in proc.stdout, proc.stdout[-3000:]
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "SURVIVED" not in proc.stdout, proc.stdout[-3000:]
