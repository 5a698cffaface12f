"""mxhorovodrun/mpi.py: finding mpirun, telling the MPIs apart by `mpirun --version`, and
the command line built for each (hydra, Open MPI, Intel MPI), against a fake mpirun."""
import json
import os
import re
import sys

import pytest

from mxhorovod_devtools.mpirun import worker_path
from mxhorovodrun.mpi import (HYDRA, INTEL_MPI, OPEN_MPI, LaunchError, classify, detect,
                              find_mpirun)
from support.launcher import GUARDED, VERSIONS, fake_mpirun, launcher, plan


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


def test_end_to_end_binding_args(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("binding 2 ranks to separate cores needs 2 usable cores")
    out = tmp_path / "logs"

    def affinities(extra):
        proc = launcher(["-np", "2", "--output-filename", str(out)] + extra +
                        [sys.executable, worker_path("output_lines.py")], timeout=180)
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
