"""mxhorovodrun (python -m mxhorovodrun): command lines for each MPI against a fake
mpirun that prints its version, the HOROVOD_* variables of the flags, OMP_NUM_THREADS,
errors, --check-build, and real runs under the venv's mpirun asserting on every rank
(also each rank's output files, binding and timestamps), and that the launcher imports
neither mxhorovod nor MXNet."""
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mpirun import HERE, WORKERS, as_from_a_terminal, process_gone
from mxhorovodrun import hosts as hostlib
from mxhorovodrun.args import build_parser, parse_args
from mxhorovodrun.cores import usable_cores
from mxhorovodrun.guard import guard_path
from mxhorovodrun.launch import main, prepare
from mxhorovodrun.mpi import (HYDRA, INTEL_MPI, OPEN_MPI, LaunchError, classify, detect,
                                  find_mpirun)
from mxhorovodrun.output import pad_rank
from mxhorovodrun.startup import Deadline, check_hosts, remote_hosts

REPO = os.path.dirname(HERE)
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
    full["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
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
    assert cmd[1:] == ["-np", "4", "-hosts", "h1:2,h2:2", "-bind-to", "none", "-map-by", "slot",
                       "-outfile-pattern", "/cap/stdout.%r", "-errfile-pattern", "/cap/stderr.%r", "-genvall", "-launcher", "ssh", "-launcher-exec", "/bin/standin", "-iface", "br0",
                       "-genv", "FOO", "1"] + GUARDED + ["python", "train.py", "--lr", "0.1"]
    # hydra passes the whole environment (-genvall): no -genv per variable; ssh's options
    # by variable.
    assert env["HYDRA_LAUNCHER_EXTRA_ARGS"] == "-p 2222 -i /k/id"
    assert env["NCCL_SOCKET_IFNAME"] == "br0" and notes == []


def test_hydra_local_and_hostfile(tmp_path):
    cmd, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "python", "t.py"])
    assert cmd[1:] == ["-np", "2", "-bind-to", "none", "-map-by", "slot", "-outfile-pattern", "/cap/stdout.%r", "-errfile-pattern", "/cap/stderr.%r",
                       "-genvall"] + GUARDED + ["python", "t.py"]
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
    from mxhorovodrun.mpi import MPI, mpirun_command
    mpi = MPI("/x/mpirun", OPEN_MPI, "4.1")
    cmd, _, _ = mpirun_command(mpi, 2, ["python"], is_root=False)
    assert "--allow-run-as-root" not in cmd and cmd[cmd.index("-H") + 1] == "localhost:2"
    cmd, _, _ = mpirun_command(mpi, 2, ["python"], is_root=True)
    assert cmd[1] == "--allow-run-as-root"


def test_intel_mpi_command_line(tmp_path):
    cmd, env, _ = plan(tmp_path, INTEL_MPI, ["-np", "4", "-H", "h1:2,h2:2", "-p", "2222",
                                             "--ssh-command", "/bin/standin", "python", "t.py"])
    assert cmd[1:] == ["-np", "4", "-hosts", "h1,h2", "-ppn", "2", "-outfile-pattern", "/cap/stdout.%r", "-errfile-pattern", "/cap/stderr.%r",
                       "-genvall", "-bootstrap", "ssh",
                       "-bootstrap-exec", "/bin/standin", "-bootstrap-exec-args", "-p 2222"] + \
        GUARDED + ["python", "t.py"]
    with pytest.raises(LaunchError, match="one number of processes per host.*h1:2,h2:1"):
        plan(tmp_path, INTEL_MPI, ["-np", "3", "-H", "h1:2,h2:1", "python", "t.py"])


@pytest.mark.parametrize("flavour", [HYDRA, INTEL_MPI])
def test_environment_choice_in_mpi_args_replaces_genvall(tmp_path, flavour):
    # hydra refuses a second choice ("duplicate setting: genvall"): the user's one wins.
    for choice in ("-genvnone", "-genvlist PATH,FOO", "-genvall"):
        cmd, _, _ = plan(tmp_path, flavour, ["-np", "2", "--mpi-args=%s" % choice, "python", "t.py"])
        assert cmd.count("-genvall") == (choice == "-genvall"), (choice, cmd)
        assert cmd[-6 - len(choice.split()):-6] == choice.split()


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
    # The level in any case, as HOROVOD_LOG_LEVEL takes it (horovodrun lists it in capitals).
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "--log-level", "info", "python", "t.py"])
    assert env["HOROVOD_LOG_LEVEL"] == "INFO"


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
    (["-np", "-1", "python"], "-1 must be >= 1"),
    (["-np", "2", "--fusion-threshold-mb", "1e12", "python"], "'1e12' is not an integer"),
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


# --- what the launcher imports -------------------------------------------------------------

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


def test_old_install_finds_the_launcher_beside_the_package():
    # An editable install made before mxhorovodrun existed knows the package mxhorovod only
    # (its console script imports mxhorovod.runner.launch): after a git pull the launcher
    # is loaded from the directory beside mxhorovod, not refused.
    code = textwrap.dedent("""
        import sys
        class NoLauncher:  # the import finders of such an install
            def find_spec(self, name, path=None, target=None):
                if name == "mxhorovodrun":
                    raise ModuleNotFoundError("No module named 'mxhorovodrun'", name=name)
        sys.meta_path.insert(0, NoLauncher())
        from mxhorovod.runner.launch import run_commandline
        import mxhorovodrun.launch
        assert run_commandline is mxhorovodrun.launch.run_commandline
        print(sys.modules["mxhorovodrun"].__file__)
    """)
    full = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", code], env=full, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == os.path.join(REPO, "mxhorovodrun", "__init__.py")


# --- the real launcher, as a user runs it -------------------------------------------------

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
                 "MPI launcher: MPICH (hydra) ", "Features:", "[X] CPU tensors",
                 "mxhorovod loaded: %s\n" % os.path.join(REPO, "mxhorovod")):
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
        "OMP_NUM_THREADS": str(max(1, usable_cores() // 2)), "FOO": "bar"}}
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
    want = {"size": 3, "init_error": None, "guard": True,
            "env": {"HOROVOD_CACHE_CAPACITY": "8", "FOO": "bar", "HYDRA_ENV": "none"}}
    _run_env_worker(["-H", "fakehost1:1,fakehost2:2", "-p", "2222", "--ssh-command", str(standin),
                     "--cache-capacity", "8"], want, np_=3,
                    env={"FOO": "bar", "HYDRA_ENV": "none", "MXHOROVOD_RANK_GUARD": ""})
    calls = log.read_text().splitlines()
    hosts = sorted(re.match(r"^(?:-x )?-p 2222 (fakehost\d) ", c).group(1) for c in calls)
    assert hosts == ["fakehost1", "fakehost2"], calls


def test_end_to_end_unbuffered_lines_stay_whole():
    # Under PYTHONUNBUFFERED=1 a print is two writes (the text, then the newline). Hydra's
    # -l, the console's default before, tagged each write: "[0] line 0 xxx[0] " and the
    # ranks' lines run together. The relay prints each line whole, in each rank's order.
    script = ('import os; r = int(os.environ["PMI_RANK"])\n'
              'for i in range(300):\n'
              '    print("rank %d line %d" % (r, i), "x" * 40)\n')
    proc = launcher(["-np", "2", sys.executable, "-c", script],
                    env={"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = proc.stdout.splitlines()
    seen = {0: [], 1: []}
    for line in lines:
        m = re.fullmatch(r"\[(\d)\] rank (\d) line (\d+) x{40}", line)
        assert m and m.group(1) == m.group(2), (line, proc.stdout[-3000:])
        seen[int(m.group(1))].append(int(m.group(3)))
    assert seen == {0: list(range(300)), 1: list(range(300))}


def test_end_to_end_killed_rank_ends_the_job():
    # Rank 1 dies by SIGKILL after 3 allreduces; mpirun (mxhorovodrun's child) ends the
    # other rank and exits non-zero, long before the survivor's 60 s would run out. Its
    # rank guard names it (MPICH's banner names a pid, not always the killed rank's).
    proc = launcher(["-np", "2", sys.executable, os.path.join(WORKERS, "multihost_kill.py"), "1"],
                    timeout=120)
    assert "RANK 1 KILLS ITSELF" in proc.stdout, proc.stdout[-3000:]
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "SURVIVED" not in proc.stdout, proc.stdout[-3000:]
    assert re.search(r"^\[1\] \[1\]<error> %s mxhorovod: rank 1 \(pid \d+ on \S+\) was killed by "
                     r"SIGKILL \(signal 9\); mpirun ends the job$" % LOG_TIME, proc.stdout, re.M), \
        proc.stdout[-3000:]


# --- the rank guard (mxhorovod/rank_guard.py in front of every rank, by default) ----------


def test_rank_guard_in_front_of_every_rank(tmp_path):
    # The guard of the mxhorovod this Python imports (this checkout's, pytest's rootdir).
    assert guard_path() == GUARD_PATH and os.path.isfile(GUARD_PATH)
    for flavour in (HYDRA, OPEN_MPI, INTEL_MPI):
        # Any command, python or not; after --mpi-args' words, before the command's.
        cmd, _, _ = plan(tmp_path, flavour, ["-np", "2", "--mpi-args=-v", "bash", "run.sh", "-x"])
        assert cmd[-8:] == ["-v"] + GUARDED + ["bash", "run.sh", "-x"], (flavour, cmd)
        # Turned off: the command as given, as before.
        cmd, _, _ = plan(tmp_path, flavour, ["-np", "2", "--no-rank-guard", "python", "t.py"])
        assert GUARD_PATH not in cmd and "-I" not in cmd and cmd[-2:] == ["python", "t.py"], cmd
    for value, on in (("0", False), ("false", False), (" No ", False), ("OFF", False),
                      ("1", True), ("", True), ("yes", True), ("on", True)):
        cmd, _, _ = plan(tmp_path, HYDRA, ["-np", "2", "python", "t.py"],
                         environ={"MXHOROVOD_RANK_GUARD": value})
        assert (GUARD_PATH in cmd) == on, (value, cmd)
    # The flag wins over the variable.
    cmd, _, _ = plan(tmp_path, HYDRA, ["-np", "2", "--rank-guard", "python", "t.py"],
                     environ={"MXHOROVOD_RANK_GUARD": "0"})
    assert cmd[-6:] == GUARDED + ["python", "t.py"]
    cmd, _, _ = plan(tmp_path, HYDRA, ["-np", "2", "--no-rank-guard", "python", "t.py"],
                     environ={"MXHOROVOD_RANK_GUARD": "1"})
    assert GUARD_PATH not in cmd
    help_text = build_parser().format_help()
    assert "--no-rank-guard" in help_text and "MXHOROVOD_RANK_GUARD" in help_text
    assert "--rank-guard " not in help_text.replace("--no-rank-guard", "")


def test_missing_rank_guard_is_named_and_nothing_starts(tmp_path, monkeypatch, capsys):
    import mxhorovodrun.guard as guard
    # Nowhere to be found: the places are named, and the way to run without it.
    with monkeypatch.context() as m:
        m.setattr(guard.os.path, "isfile", lambda _path: False)
        with pytest.raises(FileNotFoundError, match=r"the rank guard \(mxhorovod/rank_guard\.py\) "
                           r"is not in .*mxhorovod: reinstall mxhorovod, or run the ranks "
                           r"without it \(--no-rank-guard, or MXHOROVOD_RANK_GUARD=0\)"):
            guard.guard_path()

    def missing():
        raise FileNotFoundError("the rank guard (mxhorovod/rank_guard.py) is not in /x")
    monkeypatch.setattr(guard, "guard_path", missing)
    monkeypatch.setenv("MXHOROVOD_MPIRUN", fake_mpirun(tmp_path, VERSIONS[HYDRA]))
    monkeypatch.delenv("MXHOROVOD_RANK_GUARD", raising=False)
    started = []
    assert main(["-np", "2", "python", "t.py"], **starts(started)) == 1 and started == []
    assert "mxhorovodrun: error: the rank guard (mxhorovod/rank_guard.py) is not in /x" in \
        capsys.readouterr().err
    assert main(["-np", "2", "--no-rank-guard", "python", "t.py"], **starts(started)) == 0
    assert started[0][1][-2:] == ["python", "t.py"]


def test_end_to_end_rank_ending_without_finalizing_mpi_fails_the_job(tmp_path):
    # hvd.init(), then os._exit(0) on rank 1 while rank 0 waits in an allreduce: mpirun
    # killed rank 0 by SIGKILL, nothing was printed, and mxhorovodrun exited 0. Under the
    # guard (the default) rank 1 is named, on the console and in its file, and the job fails.
    out = tmp_path / "logs"
    worker = os.path.join(WORKERS, "exit_without_finalize.py")
    proc = launcher(["-np", "2", "--output-filename", str(out), sys.executable, worker,
                     "os_exit"], env={"MXHOROVOD_RANK_GUARD": ""}, timeout=120)
    line = (r"\[1\]<error> %s mxhorovod: rank 1 \(pid \d+ on \S+\) exited with code 0 while MPI "
            r"was running in it, without finalizing it \(after hvd\.init\(\): os\._exit\(\), .*; "
            r"this guard exits "
            r"with code 1, not 0" % LOG_TIME)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert re.search(r"^\[1\] %s$" % line, proc.stdout, re.M), proc.stdout[-3000:]
    assert re.fullmatch(line + "\n", (out / "rank.1" / "stderr").read_text()), \
        (out / "rank.1" / "stderr").read_text()
    assert "RANK 0 OK" not in proc.stdout and "without finalizing" not in \
        (out / "rank.0" / "stderr").read_text(), proc.stdout[-3000:]


# Each rank starts a child that would sleep 100 s; rank 1 then dies of SIGKILL, once rank 0's
# child runs (rank 0 writes the file of argv[1]).
_FORKS_THEN_DIES = """
import os, signal, subprocess, sys, time
rank, ready = os.environ["PMI_RANK"], sys.argv[1]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100)"])
print("RANK %s CHILD %d" % (rank, child.pid), flush=True)
if rank == "0":
    open(ready, "w").close()
    time.sleep(100)
    print("SURVIVED", flush=True)
while not os.path.exists(ready):
    time.sleep(0.05)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_end_to_end_what_the_ranks_forked_ends_with_a_killed_job(tmp_path):
    # Under the guard each rank has a process group of its own, and hydra's cleanup (SIGKILL
    # to the group of each process it started: the guard's) no longer reached what the
    # ranks forked: each child, holding its rank's output pipes, kept mpirun and the job
    # waiting until it ended (100 s here; a busy multiprocessing pool, a sleep, forever).
    # Now the job ends as without the guard and the children are gone.
    proc = launcher(["-np", "2", sys.executable, "-c", _FORKS_THEN_DIES, str(tmp_path / "ready")],
                    timeout=60)
    out = proc.stdout
    assert proc.returncode != 0 and "SURVIVED" not in out, out[-3000:]
    assert re.search(r"rank 1 \(pid \d+ on \S+\) was killed by SIGKILL", out), out[-3000:]
    children = [int(p) for p in re.findall(r"RANK \d CHILD (\d+)", out)]
    assert len(children) == 2 and all(process_gone(p) for p in children), out[-3000:]


def test_end_to_end_stdin_goes_to_rank_0_and_the_others_read_its_end():
    # Hydra feeds stdin to rank 0 only and gives the others a pipe that never ends: a rank
    # other than 0 reading stdin (input(), sys.stdin.read()) hung the job. Under the guard
    # they read an end of file at once, as under Open MPI (--no-rank-guard: hydra's way).
    script = "import os, sys; print('RANK', os.environ['PMI_RANK'], repr(sys.stdin.read()))"
    proc = launcher(["-np", "3", sys.executable, "-c", script], stdin_text="xyz\n", timeout=60)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for rank, text in ((0, "'xyz\\n'"), (1, "''"), (2, "''")):
        assert "[%d] RANK %d %s\n" % (rank, rank, text) in proc.stdout, proc.stdout[-3000:]


@pytest.mark.parametrize("opt_out", [["--no-rank-guard"], ["MXHOROVOD_RANK_GUARD=0"]])
def test_end_to_end_rank_guard_turned_off_runs_as_before(opt_out):
    # The same job without the guard: mpirun's own outcome, no word of the guard. Hydra's
    # outcome is a race of its own: as a rule exit status 0 and nothing printed, now and then
    # (1 fresh-clone CI run) its "BAD TERMINATION ... EXIT CODE: 9" banner and status 9, and
    # in one CI run (2026-12-03) it left rank 0 waiting: rank 0 then ends the job itself,
    # naming rank 1 (peer_watch.h), which fails the job.
    flags = [a for a in opt_out if a.startswith("--")]
    env = dict(a.split("=", 1) for a in opt_out if "=" in a)
    proc = launcher(["-np", "2"] + flags + [sys.executable,
                                            os.path.join(WORKERS, "exit_without_finalize.py"),
                                            "os_exit"], env=env, timeout=120)
    survivor = re.search(r"\[0\]<error> %s mxhorovod: rank 1 \(pid \d+ on \S+\) has ended while "
                         r"this rank waited for it in " % LOG_TIME, proc.stdout)
    assert proc.returncode in (0, 9) or (survivor and proc.returncode != 0), proc.stdout[-3000:]
    assert proc.stdout.count("mxhorovod: rank") == (1 if survivor else 0), proc.stdout[-3000:]
    assert "without finalizing" not in proc.stdout and "RANK 0 OK" not in proc.stdout, \
        proc.stdout[-3000:]


@pytest.mark.parametrize("guard", [True, False])
def test_end_to_end_a_normal_job_under_the_guard_is_unchanged(guard):
    # Every rank checks that its parent is the guard (a Python under -I without MXNet),
    # that it leads a process group of its own, and its allreduce; exit status 0.
    want = {"size": 3, "init_error": None, "guard": guard, "env": {"FOO": "bar"}}
    _run_env_worker([] if guard else ["--no-rank-guard"], want, np_=3,
                    env={"FOO": "bar", "MXHOROVOD_RANK_GUARD": ""})


# --- horovodrun's launch flags: --start-timeout, --output-filename, ---------------------
# --- --prefix-output-with-timestamp, --tcp, --binding-args, --mpi-threads-disable, --------
# --- --num-nccl-streams -------------------------------------------------------------------

NEW_FLAGS = ["--start-timeout", "--output-filename", "--prefix-output-with-timestamp", "--tcp",
             "--binding-args", "--mpi-threads-disable", "--num-nccl-streams"]


def test_launch_flags_parse():
    args = parse_args(["-np", "2", "--start-timeout", "45", "--output-filename", "logs",
                       "--prefix-output-with-timestamp", "--tcp",
                       "--binding-args=-bind-to core -map-by core", "--mpi-threads-disable",
                       "--num-nccl-streams", "3", "python", "t.py"], environ={})
    assert (args.start_timeout, args.output_filename, args.prefix_output_with_timestamp,
            args.tcp_flag, args.binding_args, args.mpi_threads_disable,
            args.num_nccl_streams) == (45, "logs", True, True, "-bind-to core -map-by core", True, 3)
    assert args.command == ["python", "t.py"]
    args = parse_args(["-np", "2", "python", "t.py"], environ={})
    assert (args.start_timeout, args.output_filename, args.prefix_output_with_timestamp,
            args.tcp_flag, args.binding_args, args.mpi_threads_disable,
            args.num_nccl_streams) == (None, None, False, False, None, None, None)
    assert parse_args(["-np", "2", "--no-mpi-threads-disable", "python"],
                      environ={}).mpi_threads_disable is False
    # horovodrun's alternative to --start-timeout; the flag wins.
    assert parse_args(["-np", "2", "python"], environ={"HOROVOD_START_TIMEOUT": "12"}).start_timeout == 12
    assert parse_args(["-np", "2", "--start-timeout", "3", "python"],
                      environ={"HOROVOD_START_TIMEOUT": "12"}).start_timeout == 3
    help_text = build_parser().format_help()
    for flag in NEW_FLAGS:
        assert flag in help_text, flag
    assert "--no-mpi-threads-disable" not in help_text


def test_double_dash_before_the_command():
    # "mxhorovodrun -np 2 -- python t.py": the "--" reached mpirun, and hydra failed with
    # "error parsing input array"; a "--" inside the command is the command's.
    assert parse_args(["-np", "2", "--", "python", "t.py", "--", "x"],
                      environ={}).command == ["python", "t.py", "--", "x"]
    assert parse_args(["-np", "2", "python", "--"], environ={}).command == ["python", "--"]
    with pytest.raises(SystemExit):
        parse_args(["-np", "2", "--"], environ={})


@pytest.mark.parametrize("argv,environ,message", [
    (["--start-timeout", "0"], {}, "must be >= 1"),
    (["--start-timeout", "-5"], {}, "must be >= 1"),
    (["--start-timeout", "1.5"], {}, "is not an integer"),
    ([], {"HOROVOD_START_TIMEOUT": "soon"}, "HOROVOD_START_TIMEOUT=soon: 'soon' is not an integer"),
    ([], {"HOROVOD_START_TIMEOUT": "0"}, "HOROVOD_START_TIMEOUT=0"),
    (["--num-nccl-streams", "0"], {}, "must be >= 1"),
    (["--num-nccl-streams", "two"], {}, "is not an integer"),
    (["--binding-args", ""], {}, "--binding-args is empty"),
    (["--binding-args", "-bind-to 'core"], {}, "No closing quotation"),
    (["--output-filename", ""], {}, "--output-filename needs a directory"),
    (["--mpi-threads-disable", "--no-mpi-threads-disable"], {}, "not allowed with"),
    (["--tcp=1"], {}, "ignored explicit argument"),
    ([], {"MXHOROVOD_RANK_GUARD": "maybe"}, "MXHOROVOD_RANK_GUARD=maybe: 1 (the default"),
    (["--rank-guard", "--no-rank-guard"], {}, "not allowed with"),
])
def test_bad_launch_flags(argv, environ, message, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["-np", "2"] + argv + ["python", "t.py"], environ=environ)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_binding_args_replace_the_default(tmp_path):
    binding = ["--binding-args", "-bind-to core:2 -map-by 'numa'"]
    cmd, _, _ = plan(tmp_path, HYDRA, ["-np", "2"] + binding + ["python", "t.py"])
    assert cmd[1:] == ["-np", "2", "-bind-to", "core:2", "-map-by", "numa", "-outfile-pattern", "/cap/stdout.%r", "-errfile-pattern", "/cap/stderr.%r",
                       "-genvall"] + GUARDED + ["python", "t.py"]
    cmd, _, _ = plan(tmp_path, OPEN_MPI, ["-np", "2", "--binding-args", "--bind-to socket",
                                          "python", "t.py"])
    assert cmd[cmd.index("localhost:2") + 1:cmd.index("localhost:2") + 3] == ["--bind-to", "socket"]
    assert "none" not in cmd and "--map-by" not in cmd
    cmd, _, _ = plan(tmp_path, INTEL_MPI, ["-np", "2", "--binding-args", "-map-by core",
                                           "python", "t.py"])
    assert cmd[1:] == ["-np", "2", "-map-by", "core", "-outfile-pattern", "/cap/stdout.%r", "-errfile-pattern", "/cap/stderr.%r", "-genvall"] + \
        GUARDED + ["python", "t.py"]


def test_tcp_flag(tmp_path):
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--tcp", "python", "t.py"])
    assert env["UCX_TLS"] == "tcp,self" and notes == []
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "python", "t.py"])
    assert "UCX_TLS" not in env
    # The user's own choice is kept, and said so.
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--tcp", "-x", "UCX_TLS=tcp", "python", "t.py"])
    assert env["UCX_TLS"] == "tcp" and notes == ["--tcp: UCX_TLS=tcp is already set; kept"]
    for flavour in (OPEN_MPI, INTEL_MPI):
        _, env, notes = plan(tmp_path, flavour, ["-np", "2", "--tcp", "python", "t.py"])
        assert "UCX_TLS" not in env
        assert len(notes) == 1 and notes[0].startswith("--tcp: no effect with %s" % flavour), notes


def test_library_flags_warn_that_they_do_nothing(tmp_path):
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--mpi-threads-disable",
                                           "--num-nccl-streams", "4", "python", "t.py"])
    assert env["HOROVOD_MPI_THREADS_DISABLE"] == "1" and env["HOROVOD_NUM_NCCL_STREAMS"] == "4"
    assert len(notes) == 2, notes
    assert notes[0].startswith("--mpi-threads-disable: no effect") and "MPI_THREAD_MULTIPLE" in notes[0]
    assert notes[1].startswith("--num-nccl-streams: no effect") and "no NCCL" in notes[1]
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--no-mpi-threads-disable", "python", "t.py"])
    assert env["HOROVOD_MPI_THREADS_DISABLE"] == "0" and notes == []


def test_horovodrun_flags_without_effect_set_their_variables_and_warn(tmp_path):
    # horovodrun 0.28.1's --thread-affinity (acted on: tests/test_host_cores.py),
    # --gloo-timeout-seconds, --[no-]hierarchical-allgather and --[no-]torus-allreduce: a
    # horovodrun command line runs, with a warning per flag that does nothing here (it was
    # "unrecognized arguments").
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--thread-affinity", "0, 1",
                                           "--gloo-timeout-seconds", "30",
                                           "--hierarchical-allgather", "--no-torus-allreduce",
                                           "python", "t.py"])
    assert (env["HOROVOD_THREAD_AFFINITY"], env["HOROVOD_GLOO_TIMEOUT_SECONDS"],
            env["HOROVOD_HIERARCHICAL_ALLGATHER"], env["HOROVOD_TORUS_ALLREDUCE"]) == ("0,1", "30", "1", "0")
    # --no-torus-allreduce asks for what mxhorovod does: no warning (as --no-mpi-threads-disable).
    assert [n.split(":")[0] for n in notes] == ["--gloo-timeout-seconds",
                                               "--hierarchical-allgather"], notes
    assert all(": no effect" in n for n in notes), notes
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--torus-allreduce", "python", "t.py"])
    assert env["HOROVOD_TORUS_ALLREDUCE"] == "1"
    assert len(notes) == 1 and notes[0].startswith("--torus-allreduce: no effect"), notes
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "python", "t.py"])
    assert notes == [] and not {"HOROVOD_THREAD_AFFINITY", "HOROVOD_GLOO_TIMEOUT_SECONDS",
                                "HOROVOD_HIERARCHICAL_ALLGATHER", "HOROVOD_TORUS_ALLREDUCE"} & set(env)
    help_text = build_parser().format_help()
    for flag in ("--thread-affinity", "--gloo-timeout-seconds", "--hierarchical-allgather",
                 "--torus-allreduce", "--min-np", "--jsrun", "--config-file"):
        assert flag in help_text, flag


def test_old_timestamp_flag_names():
    # horovodrun's names before 0.21.0, which horovodrun 0.28.1 still takes.
    from mxhorovodrun.settings import horovod_env
    args = parse_args(["-np", "2", "--log-hide-timestamp", "python", "t.py"], environ={})
    assert args.log_with_timestamp is False and horovod_env(args)["HOROVOD_LOG_HIDE_TIME"] == "1"
    args = parse_args(["-np", "2", "--no-log-hide-timestamp", "python", "t.py"], environ={})
    assert args.log_with_timestamp is True and horovod_env(args)["HOROVOD_LOG_HIDE_TIME"] == "0"


@pytest.mark.parametrize("argv,message", [
    (["--min-np", "1"], "--min-np: elastic training needs --host-discovery-script"),
    (["--max-np", "4"], "--max-np: elastic training needs --host-discovery-script"),
    (["--min-num-proc", "1"], "--min-np: elastic training needs"),
    (["--max-num-proc", "4"], "--max-np: elastic training needs"),
    (["--slots-per-host", "2"], "--slots-per-host: elastic training needs"),
    (["--elastic-timeout", "60"], "--elastic-timeout: elastic training needs"),
    (["--reset-limit", "3"], "--reset-limit: elastic training needs"),
    (["--blacklist-cooldown-range", "10", "100"], "--blacklist-cooldown-range: elastic training"),
    (["--host-discovery-script", "d.sh", "--min-np", "3", "--max-np", "2"],
     "--max-np 2 is less than --min-np 3"),
    (["--host-discovery-script", "d.sh", "--blacklist-cooldown-range", "9", "3"],
     "--blacklist-cooldown-range 9 3: MIN is more than MAX"),
    (["--host-discovery-script", "d.sh", "-H", "a:2"], "not allowed with argument"),
    (["--config-file", "c.yaml"], "--config-file: not supported; give the options as flags"),
    (["--jsrun"], "--jsrun: LSF's jsrun is not supported"),
    (["--thread-affinity", "-1"], "is not a comma-separated list of core ids"),
    (["--thread-affinity", "0,x"], "is not a comma-separated list of core ids"),
    (["--hierarchical-allgather", "--no-hierarchical-allgather"], "not allowed with"),
])
def test_refused_horovodrun_flags(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["-np", "2"] + argv + ["python", "t.py"], environ={})
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_library_flags_warning_reaches_stderr(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MXHOROVOD_MPIRUN", fake_mpirun(tmp_path, VERSIONS[HYDRA]))
    started = []
    assert main(["-np", "2", "--mpi-threads-disable", "--num-nccl-streams", "2", "python", "t.py"],
                **starts(started)) == 0
    err = capsys.readouterr().err.splitlines()
    assert sum(line.startswith("mxhorovodrun: warning: --mpi-threads-disable: no effect")
               for line in err) == 1, err
    assert sum(line.startswith("mxhorovodrun: warning: --num-nccl-streams: no effect")
               for line in err) == 1, err
    assert len(started) == 1


def test_output_flags_command_lines(tmp_path):
    # hydra (and Intel MPI): each rank's output to the launcher's pipes, no -l (the
    # launcher tags the lines itself), with or without the output flags.
    for flags in (["--output-filename", "out"], ["--prefix-output-with-timestamp"], []):
        for flavour in (HYDRA, INTEL_MPI):
            cmd, _, _ = plan(tmp_path, flavour, ["-np", "2"] + flags + ["python", "t.py"])
            assert "-l" not in cmd
            i = cmd.index("-outfile-pattern")
            assert cmd[i:i + 4] == ["-outfile-pattern", "/cap/stdout.%r", "-errfile-pattern",
                                    "/cap/stderr.%r"], cmd
            assert cmd[-2:] == ["python", "t.py"]
    # Open MPI does both itself, as horovodrun has it do.
    cmd, _, _ = plan(tmp_path, OPEN_MPI, ["-np", "2", "--output-filename", "out",
                                          "--prefix-output-with-timestamp", "python", "t.py"])
    i = cmd.index("--output-filename")
    assert cmd[i + 1] == "out" and "--timestamp-output" in cmd and "-outfile-pattern" not in cmd


def test_pad_rank():
    assert [pad_rank(r, 2) for r in (0, 1)] == ["0", "1"]
    assert [pad_rank(r, 11) for r in (0, 3, 10)] == ["00", "03", "10"]
    assert pad_rank(7, 100) == "07" and pad_rank(7, 101) == "007" and pad_rank(0, 1) == "0"


def _standin(tmp_path, body):
    """An ssh stand-in: logs its arguments, then runs ``body`` (bash)."""
    log = tmp_path / "standin.log"
    path = tmp_path / "standin.sh"
    path.write_text('#!/bin/bash\necho "$*" >> %s\n%s\n' % (log, body))
    path.chmod(0o755)
    return str(path), log


def test_start_timeout_host_checks(tmp_path):
    assert remote_hosts([("localhost", 2), ("127.0.0.1", 1), (os.uname().nodename, 1),
                         ("node7", 1)]) == ["node7"]
    # Reached like hydra reaches them: -x, ssh's port and key, the host, a command.
    ok, log = _standin(tmp_path, 'exit 0')
    assert check_hosts([("h1", 1), ("h2", 2)], Deadline(20), ssh_command=ok, ssh_port=2222,
                       ssh_identity_file="/k/id") == []
    assert sorted(log.read_text().splitlines()) == ["-x -p 2222 -i /k/id h1 true",
                                                    "-x -p 2222 -i /k/id h2 true"]
    bad, _ = _standin(tmp_path, '[[ "$2" == h2 ]] && { echo "no route to $2" >&2; exit 255; }; exit 0')
    problems = check_hosts([("h1", 1), ("h2", 1)], Deadline(20), ssh_command=bad)
    assert len(problems) == 1 and problems[0].startswith("host h2 is not reachable") \
        and "exited with 255: no route to h2" in problems[0], problems
    # Hosts are checked at once: two hanging hosts take one timeout, not two.
    slow, _ = _standin(tmp_path, 'exec sleep 30')
    import time
    t0 = time.monotonic()
    problems = check_hosts([("h1", 1), ("h2", 1)], Deadline(2), ssh_command=slow)
    assert time.monotonic() - t0 < 10
    assert problems == ["host h%d did not answer within --start-timeout 2 s (%s -x h%d true)"
                        % (i, slow, i) for i in (1, 2)], problems


def test_start_timeout_in_main(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MXHOROVOD_MPIRUN", fake_mpirun(tmp_path, VERSIONS[HYDRA]))
    bad, log = _standin(tmp_path, 'exit 255')
    started = []
    argv = ["-np", "2", "-H", "h1,h2", "--ssh-command", bad, "python", "t.py"]
    # No timeout given: no check (as before), mpirun starts.
    assert main(argv, **starts(started)) == 0 and len(started) == 1
    assert not log.exists()
    # With one: the unreachable hosts are named and nothing starts.
    assert main(["--start-timeout", "20"] + argv, **starts(started)) == 1
    err = capsys.readouterr().err
    assert "mxhorovodrun: error: host h1 is not reachable" in err and "host h2 is not reachable" in err
    assert len(started) == 1
    # ... also when given by HOROVOD_START_TIMEOUT.
    monkeypatch.setenv("HOROVOD_START_TIMEOUT", "20")
    assert main(argv, **starts(started)) == 1 and len(started) == 1
    monkeypatch.delenv("HOROVOD_START_TIMEOUT")
    # Only this host: nothing to check.
    assert main(["--start-timeout", "20", "-np", "2", "-H", "localhost:2", "python", "t.py"],
                **starts(started)) == 0 and len(started) == 2
    # Identifying mpirun counts too.
    monkeypatch.setenv("FAKE_VERSION_SLEEP", "30")
    import time
    t0 = time.monotonic()
    assert main(["--start-timeout", "1", "-np", "2", "python", "t.py"],
                **starts(started)) == 1
    assert time.monotonic() - t0 < 15
    assert "--version did not answer within" in capsys.readouterr().err and len(started) == 2


def _asctime_prefix():
    return r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4} "


def test_end_to_end_output_filename(tmp_path):
    out = tmp_path / "logs"
    tmp = tmp_path / "tmp"  # the launcher's own: other jobs' launchers use /tmp meanwhile
    tmp.mkdir()
    proc = launcher(["-np", "2", "--output-filename", str(out), sys.executable,
                     os.path.join(WORKERS, "runner_output.py")], env={"TMPDIR": str(tmp)},
                    timeout=180)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert sorted(os.listdir(out)) == ["rank.0", "rank.1"]
    for r in range(2):
        d = out / ("rank.%d" % r)
        assert sorted(os.listdir(d)) == ["stderr", "stdout"]
        stdout = (d / "stdout").read_text().splitlines()
        assert stdout[:2] == ["out first of rank %d" % r, "out split line of rank %d" % r], stdout
        assert stdout[2].startswith("AFFINITY %d " % r) and stdout[3] == "RANK %d OK" % r, stdout
        assert len(stdout) == 4, stdout
        # Only this rank's, exactly as written (the unterminated last line too).
        assert (d / "stderr").read_text() == "err of rank %d\nerr unterminated of rank %d" % (r, r)
        # ... and on the console, tagged with the rank, one line at a time.
        for line in ("out first of rank %d" % r, "out split line of rank %d" % r, "RANK %d OK" % r,
                     "err of rank %d" % r, "err unterminated of rank %d" % r):
            assert re.search(r"^\[%d\] %s$" % (r, line), proc.stdout, re.M), (line, proc.stdout[-3000:])
    # The launcher's pipes are gone.
    assert os.listdir(tmp) == []


def test_end_to_end_timestamps_and_padded_ranks(tmp_path):
    out = tmp_path / "logs"
    script = ('import os, sys; r = os.environ["PMI_RANK"]; print("hello from", r); '
              'print("oops", r, file=sys.stderr)')
    proc = launcher(["-np", "11", "--output-filename", str(out), "--prefix-output-with-timestamp",
                     sys.executable, "-c", script], env={"OMP_NUM_THREADS": "1"}, timeout=180)
    assert proc.returncode == 0, proc.stdout[-6000:]
    stamp = _asctime_prefix()
    assert sorted(os.listdir(out)) == ["rank.%02d" % r for r in range(11)]
    for r in range(11):
        d = out / ("rank.%02d" % r)
        assert re.fullmatch(stamp + r"hello from %d\n" % r, (d / "stdout").read_text()), r
        assert re.fullmatch(stamp + r"oops %d\n" % r, (d / "stderr").read_text()), r
        assert re.search("^%s\\[%d\\] hello from %d$" % (stamp, r, r), proc.stdout, re.M), proc.stdout
    # Timestamps alone: on the console only, no files.
    proc = launcher(["-np", "2", "--prefix-output-with-timestamp", sys.executable, "-c", script],
                    timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for r in range(2):
        assert re.search("^%s\\[%d\\] oops %d$" % (stamp, r, r), proc.stdout, re.M), proc.stdout


def test_end_to_end_output_filename_with_the_console_gone(tmp_path):
    # "mxhorovodrun --output-filename DIR ... | head": once the console's reader had gone,
    # each relaying thread died of a BrokenPipeError (a traceback per rank and stream) and
    # closed its rank's pipe, so DIR/rank.<r>/stdout stopped at the lines already relayed.
    out = tmp_path / "logs"
    script = ('import os, sys, time; r = os.environ["PMI_RANK"]\n'
              'for i in range(30):\n'
              '    sys.stdout.write("line %d of rank %s\\n" % (i, r)); sys.stdout.flush()\n'
              '    time.sleep(0.01)\n')
    full = dict(os.environ, OMP_NUM_THREADS="1")
    full["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    r, w = os.pipe()
    os.close(r)  # no reader at all: the first console write fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "mxhorovodrun", "-np", "2",
                               "--output-filename", str(out), sys.executable, "-c", script],
                              env=full, stdout=w, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(w)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for rank in range(2):
        lines = (out / ("rank.%d" % rank) / "stdout").read_text().splitlines()
        assert lines == ["line %d of rank %d" % (i, rank) for i in range(30)], lines


def test_end_to_end_captured_exit_status_and_killed_rank(tmp_path):
    # The launcher is mpirun's parent now: the rank's exit status still comes back, and a
    # killed rank still ends the job.
    proc = launcher(["-np", "2", "--prefix-output-with-timestamp", sys.executable, "-c",
                     "import sys; sys.exit(3)"], timeout=120)
    assert proc.returncode == 3, proc.stdout[-3000:]
    out = tmp_path / "logs"
    proc = launcher(["-np", "2", "--output-filename", str(out), sys.executable,
                     os.path.join(WORKERS, "multihost_kill.py"), "1"], timeout=120)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "RANK 1 KILLS ITSELF" in (out / "rank.1" / "stdout").read_text()
    assert "SURVIVED" not in proc.stdout


def test_end_to_end_binding_args(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("binding 2 ranks to separate cores needs 2 usable cores")
    out = tmp_path / "logs"

    def affinities(extra):
        proc = launcher(["-np", "2", "--output-filename", str(out)] + extra +
                        [sys.executable, os.path.join(WORKERS, "runner_output.py")], timeout=180)
        assert proc.returncode == 0, proc.stdout[-6000:]
        found = []
        for r in range(2):
            text = (out / ("rank.%d" % r) / "stdout").read_text()
            found.append(set(json.loads(re.search(r"^AFFINITY %d (.*)$" % r, text, re.M).group(1))))
        return found

    # Default: no binding, every rank may run on every core.
    assert affinities([]) == [set(cores)] * 2
    # -bind-to core: each rank on cores of its own.
    a, b = affinities(["--binding-args", "-bind-to core -map-by core"])
    assert a and b and not (a & b) and a | b <= set(cores), (a, b)


def test_end_to_end_tcp_reaches_the_ranks():
    want = {"size": 2, "init_error": None, "env": {"UCX_TLS": "tcp,self"}}
    _run_env_worker(["--tcp"], want, env={"UCX_TLS": ""})


class _FakeMpirun:
    """Stands in for mpirun's Popen in run_captured: records how it was started; its wait()
    sends this process the signals of ``signals`` (the launcher's forwarding handler runs),
    then returns ``code``."""

    def __init__(self, signals, code):
        self.signals, self.code, self.kwargs, self.got = signals, code, None, []

    def __call__(self, argv, **kwargs):
        self.kwargs = kwargs
        return self

    def send_signal(self, signum):
        self.got.append(signum)

    def wait(self):
        for signum in self.signals:
            os.kill(os.getpid(), signum)
        return self.code

    def poll(self):
        return self.code


@pytest.mark.parametrize("signals, code, want", [
    ([], 0, 0),
    ([signal.SIGINT], 0, 0),          # the ranks caught the KeyboardInterrupt and ended well
    ([signal.SIGINT], 1, 1),
    ([signal.SIGINT, signal.SIGINT], 0, 130),  # hydra forced the abort, then said 0
    ([signal.SIGINT, signal.SIGINT], 255, 255),
])
def test_captured_run_own_session_and_interrupted_status(tmp_path, signals, code, want):
    # A Ctrl-C at the terminal signals the whole foreground process group: mpirun, in the
    # launcher's group, got SIGINT twice (the terminal's and the forwarded one), which hydra
    # takes as "force abort" and then exited 0 about one time in three.
    from mxhorovodrun.output import run_captured
    fake = _FakeMpirun(signals, code)
    capture = tmp_path / "pipes"
    capture.mkdir()
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert run_captured(["mpirun"], {}, 1, str(capture), popen=fake,
                            console=(io.BytesIO(), io.BytesIO())) == want
        assert fake.kwargs.get("start_new_session") is True, fake.kwargs
        assert fake.got == signals
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, before)


def test_captured_run_leaves_ignored_signals_ignored(tmp_path):
    # "nohup mxhorovodrun ... &": SIGHUP is ignored; forwarding it would end the job when
    # the terminal hangs up, which nohup is there to prevent (mpirun, in a session of its
    # own, would not have heard the terminal's hang-up at all).
    from mxhorovodrun.output import run_captured

    class Fake(_FakeMpirun):
        def wait(self):
            self.seen = signal.getsignal(signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGHUP)
            return self.code
    fake = Fake([], 0)
    capture = tmp_path / "pipes"
    capture.mkdir()
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert run_captured(["mpirun"], {}, 1, str(capture), popen=fake,
                            console=(io.BytesIO(), io.BytesIO())) == 0
        assert fake.seen == signal.SIG_IGN and fake.got == []
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def _wait_for_files(paths, timeout=90):
    import time
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(p) and os.path.getsize(p) for p in paths):
        assert time.monotonic() < deadline, "not all of %s appeared" % paths
        time.sleep(0.1)
    return [int(open(p).read()) for p in paths]


# Each rank writes its pid to DIR/pid.<rank> and sleeps; a Ctrl-C lets it clean up (1 s)
# and exit 0, saying so.
_SLEEPER = ('import os, sys, time; r = os.environ["PMI_RANK"]; d = sys.argv[1]\n'
            'open(os.path.join(d, "pid." + r + ".tmp"), "w").write(str(os.getpid()))\n'
            'os.rename(os.path.join(d, "pid." + r + ".tmp"), os.path.join(d, "pid." + r))\n'
            'try:\n'
            '    time.sleep(120)\n'
            'except KeyboardInterrupt:\n'
            '    print("rank", r, "cleaning up", flush=True); time.sleep(1)\n'
            '    print("rank", r, "cleaned up", flush=True)\n')


def _start_sleepers(tmp_path):
    full = dict(os.environ, OMP_NUM_THREADS="1")
    full["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.Popen([sys.executable, "-m", "mxhorovodrun", "-np", "2", sys.executable,
                             "-c", _SLEEPER, str(tmp_path)], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    try:
        pids = _wait_for_files([str(tmp_path / ("pid.%d" % r)) for r in range(2)])
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc, pids


def test_end_to_end_ctrl_c_of_the_terminal_reaches_mpirun_once(tmp_path):
    # A Ctrl-C in the terminal is a SIGINT to the whole foreground process group. mpirun,
    # in the launcher's group, got it from the terminal and once more from the launcher;
    # hydra takes a second SIGINT as "force abort": the ranks were killed in their
    # KeyboardInterrupt handling and mpirun exited 255 with assertion messages. Plain
    # mpirun lets them clean up and exits 0.
    proc, _ = _start_sleepers(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for r in range(2):
        assert "[%d] rank %d cleaned up" % (r, r) in out, out[-3000:]
    assert "Ctrl-C caught" not in out, out[-3000:]
    assert proc.returncode == 0, out[-3000:]


def test_end_to_end_the_launcher_holds_no_mxnet_while_the_job_runs(tmp_path):
    # The launcher imports mxhorovod (and MXNet: ~220 MB); as the relay's process it lived
    # as long as the job with all of it. It now execs a Python that runs the relay alone.
    proc, _ = _start_sleepers(tmp_path)
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


def test_end_to_end_launcher_killed_ends_the_job(tmp_path):
    # SIGKILL (or the OOM killer) of the launcher: with mpirun exec'ed that was mpirun's
    # death and hydra ended the ranks; with mpirun as the launcher's orphan the job ran on
    # to its end, its output going nowhere. mpirun now gets SIGTERM when the launcher dies.
    # The pipes' directory (/tmp/mxhorovodrun-*) was left behind, one per killed job; it
    # is removed now (output.remove_when_gone).
    import shutil
    import time
    proc, pids = _start_sleepers(tmp_path)
    with open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)) as f:
        pids += [int(p) for p in f.read().split()]  # mpirun
    assert len(pids) == 3
    with open("/proc/%d/cmdline" % pids[2], "rb") as f:
        argv = f.read().decode().split("\0")
    pipes = os.path.dirname(argv[argv.index("-outfile-pattern") + 1])
    assert os.path.isdir(pipes)
    proc.kill()
    proc.wait()  # not communicate(): mpirun holds the output pipe until it ends
    proc.stdout.close()
    deadline = time.monotonic() + 30
    while not (all(process_gone(p) for p in pids) and not os.path.exists(pipes)) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if not process_gone(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    pipes_left = os.path.exists(pipes)
    shutil.rmtree(pipes, ignore_errors=True)
    assert not left, "still running after the launcher was killed: %s" % left
    assert not pipes_left, "the launcher's pipes were left behind: %s" % pipes


def test_pipes_directory_removed_when_its_holders_are_gone(tmp_path):
    # The process of remove_when_gone waits, in a session of its own (the terminal's
    # Ctrl-C does not end it), for every holder of the descriptor to go.
    import time
    from mxhorovodrun.output import remove_when_gone
    pipes = tmp_path / "mxhorovodrun-x"
    pipes.mkdir()
    os.mkfifo(str(pipes / "stdout.0"))
    fd = remove_when_gone(str(pipes))
    assert fd is not None and not os.get_inheritable(fd)
    # A second holder (what the relay is, after the exec): its exit, not ours, ends it.
    os.set_inheritable(fd, True)
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE, close_fds=False)
    os.close(fd)
    try:
        waiter = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p)[3:] ==
                  ["mxhorovodrun-cleanup", str(pipes)]]
        assert len(waiter) == 1, waiter
        assert os.getsid(int(waiter[0])) != os.getsid(0)
        time.sleep(0.5)  # a chance to go wrong; the directory must stay meanwhile
        assert pipes.is_dir()
    finally:
        holder.stdin.close()
        holder.wait(60)
    deadline = time.monotonic() + 30
    while pipes.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pipes.exists()
    while not process_gone(int(waiter[0])) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process_gone(int(waiter[0]))


def _cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return f.read().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def test_relay_shows_prompts_and_progress_bars_and_bounds_a_line():
    # The relay held a line until its newline: input()'s or pdb's prompt showed only after
    # the user had typed the answer blind, a tqdm bar ("\r" + bar, "\n" at its very end)
    # not at all until it was done (and grew in memory all along), a line without newline
    # without bound. Now: what a rank leaves unfinished for PARTIAL_AFTER is shown, "\r"
    # ends a line, and at most PARTIAL_MAX of a line is held.
    import io
    import threading
    import time
    from mxhorovodrun import output

    console = io.BytesIO()
    sink = output._sinks((console, console), timestamps=False)[0]
    fds = [os.pipe() for _ in range(2)]
    threads = [threading.Thread(target=output._read, args=(r, rank, sink, None, 0.05))
               for rank, (r, _) in enumerate(fds)]
    for t in threads:
        t.start()
    w0, w1 = fds[0][1], fds[1][1]

    def shown_soon(text):
        deadline = time.monotonic() + 10
        while text not in console.getvalue():
            assert time.monotonic() < deadline, (text, console.getvalue())
            time.sleep(0.01)

    os.write(w0, b"name? ")
    shown_soon(b"[0] name? ")  # the prompt, before its answer
    os.write(w0, b"got alice\n")  # after the terminal's echo: a line of its own
    os.write(w0, b"epoch 1 ...")
    shown_soon(b"[0] epoch 1 ...")
    os.write(w0, b" done\n")  # nothing came in between: the same line goes on
    shown_soon(b"[0] epoch 1 ... done\n")  # before rank 1 writes (its reader may be first)
    os.write(w1, b"\r 10%|#   |")
    os.write(w1, b"\r 20%|##  |")
    shown_soon(b"[1]  10%|#   |\r")  # each state of the bar: a line ended by "\r"
    os.write(w1, b"\r100%|####|\nwin\r\nlast\n")
    shown_soon(b"[1] last\n")
    os.write(w1, b"\r    \r")  # tqdm clearing its bar when it closes; a pause; a print
    shown_soon(b"[1]     \r")
    time.sleep(0.2)  # 4 x partial_after: the "\r" ended that line
    os.write(w1, b"epoch done\n")
    shown_soon(b"epoch done\n")
    os.close(w1)
    threads[1].join(10)
    big = b"y" * (3 * output.PARTIAL_MAX + 5)
    os.write(w0, b"L")
    shown_soon(b"[0] L")

    def feed():
        os.write(w0, big)
        os.close(w0)
    writer = threading.Thread(target=feed)
    writer.start()
    threads[0].join(20)
    writer.join(10)
    text = console.getvalue()
    assert text.startswith(b"[0] name? [0] got alice\n[0] epoch 1 ... done\n"), text[:300]
    assert b"[1]  10%|#   |\r[1]  20%|##  |\r[1] 100%|####|\n[1] win\r\n[1] last\n" in text, text[:300]
    assert b"[1]     \r[1] epoch done\n" in text, text[:400]
    # The big line: whole, in pieces of at most PARTIAL_MAX (one rank only: not re-tagged).
    assert text.endswith(b"[0] L" + big + b"\n"), text[-100:]


def test_end_to_end_prompt_shows_before_its_answer(tmp_path):
    # Rank 0 prompts (no newline) and waits for the answer, which the test gives only
    # once it sees the prompt on the launcher's console (the relay held it until the
    # newline, i.e. until after the answer: the user answered blind).
    import threading
    import time
    answer = tmp_path / "answer"
    script = ('import os, sys, time; r = os.environ["PMI_RANK"]\n'
              'if r == "0":\n'
              '    sys.stdout.write("name? "); sys.stdout.flush()\n'
              '    deadline = time.time() + 60\n'
              '    while not os.path.exists(sys.argv[1]) and time.time() < deadline:\n'
              '        time.sleep(0.05)\n'
              '    print("answered" if os.path.exists(sys.argv[1]) else "NO ANSWER")\n')
    full = dict(os.environ, OMP_NUM_THREADS="1")
    full["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.Popen([sys.executable, "-m", "mxhorovodrun", "-np", "2", sys.executable,
                             "-c", script, str(answer)], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    seen = []
    reader = threading.Thread(target=lambda: seen.extend(iter(lambda: proc.stdout.read1(4096), b"")))
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while b"[0] name? " not in b"".join(seen) and proc.poll() is None and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        answer.write_text("alice")
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(10)
    out = b"".join(seen).decode()
    assert proc.returncode == 0, out[-3000:]
    assert re.search(r"^\[0\] name\? \[0\] answered$", out, re.M), out[-3000:]


def test_end_to_end_console_that_fails_is_named():
    # stdout on a full disk (/dev/full): the relay dropped the ranks' stdout without a
    # word and exited 0. The job still runs on (as with "| head"), and stderr says so.
    full = dict(os.environ, OMP_NUM_THREADS="1")
    full["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    with open("/dev/full", "wb") as devfull:
        proc = subprocess.run([sys.executable, "-m", "mxhorovodrun", "-np", "2", sys.executable,
                               "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
                              env=full, stdout=devfull, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("mxhorovodrun: cannot write the ranks' stdout to the console "
                             "(No space left on device)") == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and proc.stderr.count("] err") == 2, proc.stderr[-3000:]


def test_relay_loses_nothing_on_a_console_made_non_blocking():
    # mpirun shares the launcher's console (same open file) and hydra makes it
    # non-blocking: the relay's buffered writes then lost whole lines whenever the console's
    # reader was slower than the ranks (50 MB per rank into a slow pipe: hundreds of lines).
    import fcntl
    import threading
    import time
    from mxhorovodrun import output

    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
    console = os.fdopen(w, "wb")
    got = []

    def slow_reader():
        while True:
            chunk = os.read(r, 4096)
            if not chunk:
                break
            got.append(chunk)
            time.sleep(0.0005)
    reader = threading.Thread(target=slow_reader)
    reader.start()
    sink = output._sinks((console, console), timestamps=False)[0]
    lines = [b"%06d %s\n" % (i, b"x" * 90) for i in range(5000)]
    for line in lines:
        sink.write(0, line, None)
    console.close()
    reader.join(60)
    os.close(r)
    assert b"".join(got) == b"".join(b"[0] " + line for line in lines)



# Every option of horovodrun 0.28.1's parser (horovod/runner/launch.py), with its number of
# values: a horovodrun command line is never "unrecognized arguments" here.
HOROVODRUN_OPTIONS = [
    ("-v", 0), ("--version", 0), ("-np", 1), ("--num-proc", 1), ("-cb", 0),
    ("--check-build", 0), ("--disable-cache", 0), ("--start-timeout", 1),
    ("--network-interfaces", 1), ("--network-interface", 1), ("--output-filename", 1),
    ("--verbose", 0), ("--config-file", 1), ("-p", 1), ("--ssh-port", 1), ("-i", 1),
    ("--ssh-identity-file", 1), ("--fusion-threshold-mb", 1), ("--cycle-time-ms", 1),
    ("--cache-capacity", 1), ("--hierarchical-allreduce", 0),
    ("--no-hierarchical-allreduce", 0), ("--hierarchical-allgather", 0),
    ("--no-hierarchical-allgather", 0), ("--torus-allreduce", 0), ("--no-torus-allreduce",
    0), ("--autotune", 0), ("--no-autotune", 0), ("--autotune-log-file", 1),
    ("--autotune-warmup-samples", 1), ("--autotune-steps-per-sample", 1),
    ("--autotune-bayes-opt-max-samples", 1), ("--autotune-gaussian-process-noise", 1),
    ("--min-np", 1), ("--min-num-proc", 1), ("--max-np", 1), ("--max-num-proc", 1),
    ("--slots-per-host", 1), ("--elastic-timeout", 1), ("--reset-limit", 1),
    ("--blacklist-cooldown-range", 2), ("--timeline-filename", 1),
    ("--timeline-mark-cycles", 0), ("--no-timeline-mark-cycles", 0), ("--no-stall-check",
    0), ("--stall-check", 0), ("--stall-check-warning-time-seconds", 1),
    ("--stall-check-shutdown-time-seconds", 1), ("--mpi-threads-disable", 0),
    ("--no-mpi-threads-disable", 0), ("--mpi-args", 1), ("--tcp", 0), ("--binding-args", 1),
    ("--num-nccl-streams", 1), ("--thread-affinity", 1), ("--gloo-timeout-seconds", 1),
    ("--log-level", 1), ("--log-with-timestamp", 0), ("--log-without-timestamp", 0),
    ("-prefix-timestamp", 0), ("--prefix-output-with-timestamp", 0),
    ("--log-hide-timestamp", 0), ("--no-log-hide-timestamp", 0), ("-H", 1), ("--hosts", 1),
    ("-hostfile", 1), ("--hostfile", 1), ("--host-discovery-script", 1), ("--gloo", 0),
    ("--mpi", 0), ("--jsrun", 0),
]


@pytest.mark.parametrize("option,values", HOROVODRUN_OPTIONS)
def test_every_horovodrun_option_is_known(option, values, capsys):
    if option in ("-v", "--version", "-cb", "--check-build"):  # they act alone
        args = parse_args([option], environ={})
        assert args.version or args.check_build
        return
    value = {"--log-level": "INFO", "--output-filename": "logs", "--hostfile": "hosts",
             "-hostfile": "hosts", "--binding-args": "-bind-to core", "--mpi-args": "-v"}
    argv = [option] + [value.get(option, "1")] * values
    try:
        parse_args(["-np", "2"] + argv + ["python", "t.py"], environ={})
    except SystemExit:
        err = capsys.readouterr().err
        assert "unrecognized arguments" not in err and "invalid" not in err, (option, err)
