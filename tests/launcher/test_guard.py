"""mxhorovodrun/guard.py and the rank guard in front of every rank: a rank ending without
finalizing MPI fails the job, what the ranks forked ends with a killed job, stdin reaches
rank 0 only, and the guard turned off runs as before."""
import os
import re
import sys

import pytest

from mxhorovod_devtools.mpirun import process_gone, worker_path
from mxhorovodrun.args import build_parser
from mxhorovodrun.guard import guard_path
from mxhorovodrun.launch import main
from mxhorovodrun.mpi import HYDRA, INTEL_MPI, OPEN_MPI
from support.launcher import (GUARDED, GUARD_PATH, LOG_TIME, VERSIONS, fake_mpirun, launcher, plan,
                             run_env_worker, starts)


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
    worker = worker_path("failures_exit_without_finalize.py")
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
                                            worker_path("failures_exit_without_finalize.py"),
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
    run_env_worker([] if guard else ["--no-rank-guard"], want, np_=3,
                    env={"FOO": "bar", "MXHOROVOD_RANK_GUARD": ""})
