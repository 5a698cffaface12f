"""Failures end cleanly. A peer's shutdown (or exit) while others wait: their operations fail
naming the pending tensors and the rank that shut down, and every process ends normally. A
rank that dies (exception, SIGTERM, SIGKILL) mid-training ends the whole job at once with a
non-zero exit code, and the output names it (SIGKILL: the launcher names its pid)."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from mxhorovod_devtools.mpirun import REPO, as_from_a_terminal, process_gone, run_ranks, worker_path

GUARD = os.path.join(REPO, "mxhorovod", "rank_guard.py")
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}"


@pytest.mark.parametrize("np_,mode", [(3, "shutdown"), (2, "exit")])
def test_peer_shutdown_while_others_wait(np_, mode):
    # Rank 1 stops; the worker asserts the others' error texts (names, 'a peer rank shut down ... (rank 1:').
    run_ranks(np_, "failures_peer_shutdown.py", [mode], timeout=240)


def _died(mode, np_=3, victim=1):
    # The survivors would train for 600 s: ending before run_ranks' timeout is the check.
    # Where Hydra should end the job and now and then did not (CI runs: rank 1 of
    # segfault_stuck exited, and rank 0 was left waiting), the survivors end it themselves
    # (peer_watch.h).
    proc = run_ranks(np_, "failures_ops.py", [mode, victim], timeout=120, expect_ok=False)
    out = proc.stdout
    assert proc.returncode != 0, out
    assert "RANK" not in out.replace("WORKER", ""), out  # nobody finished training
    assert "WORKER %d DIES" % victim in out, out
    pid = int(re.search(r"WORKER %d PID (\d+)" % victim, out).group(1))
    return out, pid


def _shm_files(out):
    """MPICH's /dev/shm files that the workers mapped (ops_failure.py prints them as
    <path>, so that the ranks' interleaved output cannot glue a path to other text)."""
    return set(re.findall(r"<(/dev/shm/mpich_shm_[^<>\s]+)>", out))


def test_unhandled_exception_aborts_the_job_naming_the_rank():
    out, pid = _died("exception")
    assert re.search(r"^\[1\]<error> .* mxhorovod: rank 1 \(pid %d on \S+\) failed with an "
                     r"unhandled RuntimeError; ending the job \(MPI_Abort\)$" % pid, out, re.M), out
    assert "RuntimeError: boom on rank 1" in out  # the traceback follows


def test_unhandled_exception_before_init_with_mpi4py_aborts_the_job():
    # mpi4py started MPI: the failing rank's exit waited in MPI_Finalize for the others,
    # which waited in init() for it (a hang until the timeout).
    proc = run_ranks(3, "failures_exit_before_init_mpi4py.py", ["raise"], timeout=90, expect_ok=False)
    assert proc.returncode != 0, proc.stdout
    assert re.search(r"\[2\]<error> %s mxhorovod: rank 2 \(pid \d+ on \S+\) failed with an "
                     r"unhandled RuntimeError before hvd.init\(\) completed; ending the job \(MPI_Abort\)"
                     % TIME, proc.stdout), proc.stdout
    assert "a script failing on rank 2 before hvd.init()" in proc.stdout, proc.stdout


def test_a_forked_child_failing_before_init_with_mpi4py_ends_alone():
    run_ranks(3, "failures_exit_before_init_mpi4py.py", ["child"], timeout=90)


@pytest.mark.parametrize("mode", ["exception", "sigterm", "segfault", "segfault_stuck"])
def test_a_job_ended_by_a_dead_rank_leaves_no_mpich_files_in_dev_shm(mode):
    # MPICH unlinks its shared-memory segment at MPI_Finalize only: each job ended by
    # MPI_Abort (or a rank dying of a signal) left a file of about 1 MB per rank in /dev/shm
    # (tmpfs: RAM) until a reboot. The rank that ends the job unlinks it first.
    out, _ = _died(mode, np_=2)
    files = _shm_files(out)
    if not files:
        pytest.skip("MPI maps no /dev/shm/mpich_shm_* file here (not MPICH, or no shared memory)")
    assert not [f for f in files if os.path.exists(f)], (files, out[-2000:])


def test_a_job_whose_ranks_are_all_sigkilled_leaves_no_mpich_files_in_dev_shm():
    # Nothing runs in a SIGKILLed rank, so init() unlinks the names once every rank of the
    # host has attached (the mappings stay). Only the names a rank maps: another job's file
    # stays.
    other = "/dev/shm/mpich_shm_mxhtest%d_0" % os.getpid()
    with open(other, "wb") as f:
        f.write(b"another job's segment")
    try:
        proc = run_ranks(3, "failures_all_killed_shm.py", timeout=90, expect_ok=False)
        out = proc.stdout
        assert proc.returncode != 0 and out.count("WORKER") == 3, out
        files = _shm_files(out)
        if not files:
            pytest.skip("MPI maps no /dev/shm/mpich_shm_* file here (not MPICH, or no shared memory)")
        assert not [f for f in files if os.path.exists(f)], (files, out[-2000:])
        assert os.path.exists(other)
    finally:
        os.unlink(other)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another uid)")
def test_init_refuses_mpich_shared_memory_of_another_user():
    # MPICH names its file from the launcher's job name, which another local user can
    # predict, and opens a name made first without a check: that user would read and write
    # every message between the host's ranks. init() refuses on every rank.
    proc = run_ranks(2, "failures_foreign_mpich_shm.py", timeout=90, expect_ok=False)
    assert "INIT PASSED" not in proc.stdout, proc.stdout
    for r in range(2):
        assert "RANK %d OK" % r in proc.stdout, proc.stdout[-3000:]


@pytest.mark.parametrize("mode", ["bad", "disagree"])
def test_a_job_ended_by_a_refused_init_leaves_no_mpich_files_in_dev_shm(mode):
    # init() refuses a setting (unreadable, or different on each rank) after MPI started:
    # the unhandled error ends the job by MPI_Abort, which unlinked MPICH's file only once
    # init() had succeeded, so each such job left 1 MB per rank in /dev/shm.
    proc = run_ranks(2, "failures_init_refused_shm.py", [mode], timeout=90, expect_ok=False)
    out = proc.stdout
    assert proc.returncode != 0 and "RANK" not in out.replace("WORKER", ""), out
    assert "ending the job (MPI_Abort)" in out, out
    files = _shm_files(out)
    if not files:
        pytest.skip("MPI maps no /dev/shm/mpich_shm_* file here (not MPICH, or no shared memory)")
    assert not [f for f in files if os.path.exists(f)], (files, out[-2000:])


def test_unhandled_exception_output_is_not_cut_by_the_abort():
    # The traceback is still in the pipe to the launcher when MPI_Abort kills the launcher's
    # proxy; the abort waits until the proxy has read it (CI once got half a traceback).
    out, _ = _died("long_exception")
    assert "RuntimeError: boom on rank 1: xxx" in out and "x END OF MESSAGE" in out, out[-2000:]


def test_sigterm_names_the_rank():
    out, pid = _died("sigterm")
    assert "[1]<error> mxhorovod: rank 1 (pid %d on " % pid in out and "got SIGTERM" in out, out


def test_segfault_names_the_rank_and_keeps_mxnets_report():
    # Our line first, then the previous handler (MXNet's "Segmentation fault" report) runs.
    out, pid = _died("segfault", np_=2)
    assert "[1]<error> mxhorovod: rank 1 (pid %d on " % pid in out and "got SIGSEGV" in out, out
    assert "Segmentation fault" in out, out


def test_segfault_whose_crash_handler_never_ends_still_ends_the_job():
    # MXNet's handler calls exit(); an exit handler that waits forever kept rank 1 alive, so
    # mpirun never ended the job (CI, once: 120 s of rank 0 waiting). The watchdog ends it.
    out, pid = _died("segfault_stuck", np_=2)
    assert "Segmentation fault" in out, out
    assert re.search(r"^\[1\]<error> mxhorovod: rank 1 \(pid %d on \S+\) still runs 10 s after "
                     r"its fatal signal: the crash handler .* is stuck" % pid, out, re.M), out


def test_signals_the_script_handles_leave_the_rank_running():
    # A Python handler set before init() returns from os.kill(pid, SIGABRT): the rank went
    # on, but mxhorovod said it died, and its watchdog ended it 10 s later (exit 134). The
    # same for SIGBUS; both in one job (it runs past the watchdog's 10 s).
    out = run_ranks(2, "failures_handled_signal.py", ["SIGABRT", "SIGBUS"], timeout=120).stdout
    assert "mxhorovod: rank 1" not in out and "still runs" not in out, out


def test_sigkill_ends_the_job():
    # SIGKILL cannot be caught and the process says nothing. mpirun's banner names a pid of
    # the job, not always the killed one (it may name a rank it killed while cleaning up):
    # the rank guard below is what names it reliably.
    out, _ = _died("sigkill")
    pids = [int(p) for p in re.findall(r"WORKER \d+ PID (\d+)", out)]
    banner = re.search(r"PID (\d+) RUNNING AT", out)
    assert banner and int(banner.group(1)) in pids and "signal 9" in out, out


def test_sigkill_under_the_rank_guard_names_the_rank():
    # mpirun -np 3 python mxhorovod/rank_guard.py python ops_failure.py sigkill 1: the guard
    # of rank 1 names it; the guards mpirun kills while cleaning up say nothing.
    worker = worker_path("failures_ops.py")
    proc = run_ranks(3, GUARD, [sys.executable, worker, "sigkill", 1], timeout=120, expect_ok=False)
    out = proc.stdout
    assert proc.returncode != 0 and "RANK" not in out.replace("WORKER", ""), out
    pid = int(re.search(r"WORKER 1 PID (\d+)", out).group(1))
    assert re.search(r"^\[1\]<error> %s mxhorovod: rank 1 \(pid %d on \S+\) was killed by SIGKILL "
                     r"\(signal 9\); mpirun ends the job$" % (TIME, pid), out, re.M), out
    assert len(re.findall("was killed by", out)) == 1 and "Traceback" not in out, out


def test_rank_guard_names_a_rank_that_ended_without_finalizing_mpi():
    # os._exit(0) on rank 1 after init(): mpirun killed rank 0 (SIGKILL) in its collective
    # and the job exited 0 without a word. Under the guard, rank 1's guard names it and
    # exits 1. An unhandled exception reports itself (MPI_Abort): no second line.
    proc = run_ranks(2, "failures_exit_without_finalize.py", ["os_exit"], timeout=120, expect_ok=False,
                     prefix=[sys.executable, GUARD])
    assert proc.returncode != 0, proc.stdout
    assert re.search(r"\[1\]<error> .*rank 1 \(pid \d+ on [^)]+\) exited with code 0 while MPI "
                     r"was running in it, without finalizing it", proc.stdout), proc.stdout
    assert "RANK 0 OK" not in proc.stdout, proc.stdout
    proc = run_ranks(2, "failures_exit_without_finalize.py", ["raise"], timeout=120, expect_ok=False,
                     prefix=[sys.executable, GUARD])
    assert proc.returncode != 0, proc.stdout
    assert "failed with an unhandled RuntimeError" in proc.stdout, proc.stdout
    assert "without finalizing it" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("np_,mode,guard", [(2, "os_exit", False), (3, "sigkill", False),
                                             (2, "os_exit", True),
                                             (2, "killed_in_broadcasts", False)])
def test_a_rank_ending_while_its_forked_child_holds_the_launcher_connection_ends_the_job(
        np_, mode, guard):
    # Rank 1 forks a child (as a DataLoader worker does), then ends while the others wait
    # for it in a collective. The child keeps Hydra's connection of rank 1 open, so mpirun
    # did not end the job: the others waited forever (past this test's timeout). Now a
    # waiting rank sees its local peer gone and ends the job, naming it, and kills what
    # rank 1 forked (its process group), as mpirun's cleanup would have; also when the
    # survivors wait in a broadcast's data calls (MPI's blocking MPI_Bcast by default until
    # 2026-12-03, which never came back to look: a hang). (Under the guard a
    # rank killed by a signal is handled by the guard: it kills the group, and mpirun ends
    # the job; one that exits leaves its group running, as mpirun does.)
    proc = run_ranks(np_, "failures_exit_with_forked_child.py", [mode], timeout=45, expect_ok=False,
                     prefix=[sys.executable, GUARD] if guard else ())
    out = proc.stdout
    found = re.search(r"CHILD (\d+) RANK1 PID (\d+)", out)
    # Where the survivors waited: the negotiation, or, broadcasting, mostly the data calls
    # (now and then the negotiation between two broadcasts).
    waited_in = r"(MPI_Ibcast|MPI_\w+ \(negotiation\))" if mode == "killed_in_broadcasts" \
        else r"MPI_\w+ \(negotiation\)"
    try:
        assert found, out
        assert proc.returncode != 0 and "RANK 0 OK" not in out, out
        survivor = r"\[[02]\]<error> %s mxhorovod: rank 1 \(pid %s on \S+\) has ended while this rank " \
                   r"waited for it in %s \(its process is gone or a zombie\), .*" \
                   r"no rank can go on; ending the job \(MPI_Abort\) and what that rank forked " \
                   r"\(SIGKILL to its process group, as mpirun's cleanup does\)$" % (
                       TIME, found.group(2), waited_in)
        assert re.search(survivor, out, re.M), out
        # mpirun waited for the child too (it holds rank 1's output pipes): it is gone.
        assert _wait_until(lambda: process_gone(int(found.group(1))), 10), out
    finally:
        if found:
            try:
                os.kill(int(found.group(1)), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_peer_that_cannot_be_looked_at_is_not_taken_for_ended():
    # Rank 0 has no file descriptor left (EMFILE) while it waits for rank 1, stopped for
    # 4 s: the watch could not open rank 1's /proc entry, took it for ended, aborted the
    # job and SIGKILLed rank 1's process group. Now it only counts a peer the kernel says
    # is gone (ESRCH), a zombie, or one whose pid another process took.
    run_ranks(2, "failures_peer_watch_no_descriptors.py", timeout=90)


# The rank (and a process it forked) records the sender of each SIGINT it gets.
_SIGINT_SENDERS = """
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
who = "rank" if os.fork() else "forked"
os.write(1, b"READY %s %d %d\\n" % (who.encode(), os.getpid(), os.getpgid(0)))
seen = []
while True:
    info = signal.sigtimedwait({signal.SIGINT}, 3)
    if info is None:
        break
    seen.append(info.si_pid)
os.write(1, b"SEEN %s %s\\n" % (who.encode(), str(seen).encode()))
if who == "rank":
    os.wait()
"""


@pytest.mark.parametrize("to_group", [True, False])
def test_rank_guard_forwards_a_signal_to_the_rank_once(to_group):
    # Hydra signals the guard's process group (a Ctrl-C or SIGTERM of mpirun): the rank, in
    # that group, got the signal from hydra and again from the guard, and a second SIGINT
    # cut its KeyboardInterrupt handling short. The rank now has a group of its own; the
    # guard forwards to that group: once, from the guard, to the rank and what it forked.
    proc = subprocess.Popen([sys.executable, GUARD, sys.executable, "-c", _SIGINT_SENDERS],
                            stdout=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    try:
        ready = [proc.stdout.readline().split() for _ in range(2)]
        assert all(r[0] == "READY" for r in ready), ready
        assert {int(r[3]) for r in ready} == {int(r[2]) for r in ready if r[1] == "rank"}
        assert proc.pid not in {int(r[3]) for r in ready}  # not the guard's group
        if to_group:
            os.killpg(proc.pid, signal.SIGINT)  # the guard leads its session, as under hydra
        else:
            os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out
    for who in ("rank", "forked"):
        assert "SEEN %s [%d]" % (who, proc.pid) in out, out


# The rank starts a child (its own output to /dev/null) that would sleep 100 s, then sleeps,
# exits or dies of SIGKILL as argv[1] says.
_FORKS = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100)"],
                         stdout=subprocess.DEVNULL)
print("CHILD %d" % child.pid, flush=True)
if sys.argv[1] == "exits":
    sys.exit(0)
if sys.argv[1] == "rank_killed":
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(100)
"""


def _session(sid):
    """{pid: state} of the processes of session ``sid`` (zombies left out)."""
    members = {}
    for name in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rpartition(")")[2].split()
        except (OSError, ValueError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            members[int(name)] = fields[0]
    return members


def _wait_until(done, bound=30):
    """Polls ``done()`` until true or ``bound`` seconds have passed; returns its last value."""
    end = time.monotonic() + bound
    while not done() and time.monotonic() < end:
        time.sleep(0.05)
    return done()


@pytest.mark.parametrize("end", ["guard_killed", "rank_killed", "exits"])
def test_rank_guard_leaves_what_the_rank_forked_as_mpirun_would(end):
    # hydra ends a job by SIGKILL to the group of each process it started: the guard's. The
    # rank has a group of its own, so what it forked outlived the job, holding the rank's
    # output pipes, and mpirun waited for it (the job hung until it ended). Now what the
    # rank forked is killed when the guard is killed (by the guard's keeper) or the rank is
    # killed (by the guard), as without the guard; a rank that exits leaves it running, as
    # mpirun does.
    proc = subprocess.Popen([sys.executable, GUARD, sys.executable, "-c", _FORKS,
                             "sleeps" if end == "guard_killed" else end],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = int(proc.stdout.readline().split()[1])
        if end == "guard_killed":
            os.killpg(proc.pid, signal.SIGKILL)  # hydra's cleanup, as with the guard leading
        proc.wait(timeout=60)                    # a session of its own
        # The session holds the guard's keeper until it has done its work, and the child.
        left = _wait_until(lambda: set(_session(proc.pid)) <= {child} and
                           (end == "exits" or not _session(proc.pid))) and _session(proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        survivors = _session(proc.pid)
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == (0 if end == "exits" else -signal.SIGKILL), proc.returncode
    assert list(survivors) == ([child] if end == "exits" else []), (survivors, child)


def test_rank_guard_gives_ranks_other_than_0_an_ended_stdin_under_hydra():
    # hydra feeds stdin to rank 0 only; the other ranks' stdin is a pipe that never ends, and
    # a rank other than 0 that read it waited forever. Under hydra (HYDI_CONTROL_FD) the
    # guard gives them /dev/null; rank 0, and any rank of another launcher, get stdin.
    script = "import sys; print(repr(sys.stdin.read()))"
    for rank, hydra, want in (("1", True, "''"), ("0", True, "'xyz'"), ("1", False, "'xyz'")):
        env = dict(os.environ, PMI_RANK=rank)
        env.pop("HYDI_CONTROL_FD", None)
        if hydra:
            env["HYDI_CONTROL_FD"] = "7"
        proc = subprocess.Popen([sys.executable, GUARD, sys.executable, "-c", script],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        try:
            proc.stdin.write("xyz")
            proc.stdin.flush()
            if want == "''":  # the pipe stays open, as hydra's does
                proc.wait(timeout=60)
            proc.stdin.close()
            out = proc.stdout.read()
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert (proc.returncode, out) == (0, want + "\n"), (rank, hydra, out)


def test_rank_guard_names_a_command_it_cannot_run(tmp_path):
    # Was a traceback from the guard; mpirun says 255 when it cannot run a command itself.
    missing = str(tmp_path / "no-such-program")
    proc = subprocess.run([sys.executable, GUARD, missing, "x"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60,
                          env=dict(os.environ, PMI_RANK="3"))
    assert proc.returncode == 255, proc.stdout
    assert re.fullmatch(r"\[3\]<error> %s mxhorovod: rank 3 \(on \S+\) cannot run %s: No such "
                        r"file or directory\n" % (TIME, re.escape(missing)), proc.stdout), proc.stdout


def test_rank_guard_is_transparent_for_a_normal_job():
    # Same exit code, MPI through the guard's inherited descriptors, values checked.
    worker = worker_path("failures_peer_shutdown.py")
    run_ranks(2, GUARD, [sys.executable, worker, "shutdown"], timeout=240)


@pytest.mark.parametrize("np_", [2, 3])
def test_a_rank_that_finishes_first_lets_its_last_collectives_run(np_):
    # The others exit right after a last step() whose collectives have not run yet; rank 0
    # steps later and checks its weights (it failed with "a peer rank shut down").
    run_ranks(np_, "failures_exit_order.py", ["last_step"], timeout=120)


@pytest.mark.parametrize("np_", [2, 3])
def test_shutdown_right_after_the_last_step_lets_its_collectives_run(np_):
    # A script ending with hvd.shutdown() failed its last step on every rank.
    run_ranks(np_, "failures_exit_order.py", ["shutdown_after_last_step"], timeout=120)


def test_a_child_forked_after_init_exits_without_stopping_the_parent():
    run_ranks(2, "failures_exit_order.py", ["fork"], timeout=120)


@pytest.mark.parametrize("mode", ["parent_first", "child_first"])
def test_a_process_forked_before_init_cannot_start_mpi_twice_on_one_rank(mode):
    # A child forked before hvd.init() inherits mpirun's connection: init() in it and in
    # the rank ended the job in MPI_Init_thread (UCX "failed to unpack address", then
    # MPI_Abort). The second one's init() now raises naming the first. Under the rank guard
    # (mxhorovodrun's default): a multiprocessing child that started MPI ended by os._exit
    # without finalizing it, so the guard failed the job (and mpirun sometimes killed the
    # other rank, exit 9, 1 CI run in 4); init() now has such a child finalize at its end.
    run_ranks(2, "failures_fork_before_init.py", [mode], timeout=120, prefix=[sys.executable, GUARD])


@pytest.mark.parametrize("np_,guard", [(2, False), (3, False), (2, True)])
def test_a_pool_worker_that_formed_the_job_ends_it_cleanly_at_the_pools_end(np_, guard):
    # A `with Pool(1) as p:` block ends its worker by SIGTERM (Pool.terminate()): the worker
    # that called hvd.init() died of it without telling mpirun that MPI was finalized, and
    # mpirun killed the other ranks by SIGKILL (the last one, 2 s later: no OK), exit 0.
    run_ranks(np_, "failures_pool_forms_the_job.py", timeout=120,
              prefix=[sys.executable, GUARD] if guard else [])


def test_a_forked_child_that_fails_ends_alone_and_is_not_called_the_rank():
    # A DataLoader's pool ends its workers by SIGTERM: each printed "rank 1 (pid <the
    # rank's>) got SIGTERM; it dies of it and the launcher ends the job". An unhandled
    # exception in a child called MPI_Abort and ended the job.
    out = run_ranks(2, "failures_exit_order.py", ["fork_failures"], timeout=120).stdout
    assert "SIGTERM" not in out, out
    assert "MPI_Abort" not in out and "failed with an unhandled" not in out, out
    for r in range(2):
        assert "child of rank %d fails" % r in out, out
        assert "[%d]<error> mxhorovod: a process forked by rank %d (pid" % (r, r) in out, out
        assert "got SIGSEGV; that process dies of it" in out, out
    assert "mxhorovod: rank 0 (pid" not in out and "mxhorovod: rank 1 (pid" not in out, out


@pytest.mark.parametrize("np_,args", [(2, []), (3, []), (2, ["set"])])
def test_a_step_after_a_peer_finished_names_the_reason(np_, args):
    # Was "Horovod has not been initialized; use hvd.init(). (stopped: ...)"; over a
    # process set, "process set 1 is not registered".
    run_ranks(np_, "failures_exit_order.py", ["extra_step"] + args, timeout=120)


def test_an_exit_does_not_wait_for_a_collective_no_peer_will_call():
    run_ranks(2, "failures_exit_order.py", ["peer_blocked"], timeout=120,
              env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "2"})
