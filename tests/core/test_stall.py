"""Stall inspector on 2 ranks: rank 0's repeated warning names the tensor and the missing
rank (new names and names agreed through the response cache); past the stall shutdown time
every rank's pending operations fail naming them, and the processes end normally."""
import concurrent.futures
import os
import re
import sys

import pytest

from mxhorovod_devtools.mpirun import REPO, run_ranks

GUARD = os.path.join(REPO, "mxhorovod", "rank_guard.py")

LINE = re.compile(r"^\[(\d+)\]<(\w+)> \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} mxhorovod: (.*)$")


def log_lines(out):
    return [m.groups() for m in map(LINE.match, out.splitlines()) if m]


def test_stall_warning_names_tensor_and_missing_rank_and_repeats():
    out = run_ranks(2, "stall_ops.py", ["warn"], timeout=240,
                    env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1"}).stdout
    lines = log_lines(out)
    assert lines and all(rank == "0" and level == "warning" for rank, level, _ in lines), out
    warnings = out.split("One or more tensors were submitted by some ranks")
    uncached = [w for w in warnings if "allreduce 'stall.uncached' waited" in w]
    cached = [w for w in warnings if "allreduce 'stall.cached' waited" in w]
    # Rank 1 was 3.5 s late, then 4.5 s: the warning is repeated while the stall lasts.
    assert len(uncached) >= 2 and len(cached) >= 2, out
    for w in uncached + cached:
        assert "missing ranks 1 (submitted by 1 of 2 ranks: 0)" in w, w
    assert "HOROVOD_STALL_CHECK_TIME_SECONDS=1.0 s" in out
    assert "different calls under the name" not in out, out  # one name, one rank: no hint
    # Nothing more once the late rank has submitted (no warning after its completion line).
    assert "stall.uncached" not in out.split("RANK 0 uncached done")[1].split("stall.cached")[0]


def test_no_stall_warning_below_the_check_time():
    # The same 3.5 s and 4.5 s delays with the default check time (60 s): silent.
    out = run_ranks(2, "stall_ops.py", ["warn"], timeout=240).stdout
    assert "<warning>" not in out, out


def test_stall_shutdown_fails_pending_operations_on_every_rank():
    # HOROVOD_LOG_LEVEL=error: the warning is filtered out (C++ honours the level), the
    # shutdown's error line is not. The worker checks each rank's errors and that calls are
    # refused afterwards; run_ranks checks that both processes end with exit code 0.
    out = run_ranks(2, "stall_ops.py", ["shutdown"], timeout=240,
                    env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1",
                         "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "2",
                         "HOROVOD_LOG_LEVEL": "error"}).stdout
    lines = log_lines(out)
    assert [(r, lvl) for r, lvl, _ in lines] == [("0", "error")], out
    assert "Stall shutdown: 3 tensor(s) still waiting" in lines[0][2], lines


# mode of ops_stall.py: the hint's start, and alternatives of texts its line must hold.
_MISMATCH_HINTS = {
    # grouped_allreduce 'mixed' on rank 0 ('mixed.0', 'mixed.1'), allreduce 'mixed' on rank
    # 1: they never meet.
    "same_name": ("Probably the ranks made different calls under the name 'mixed' (",
                  [("ranks 0 submitted allreduce 'mixed.0'", "ranks 1 submitted allreduce 'mixed'")]),
    # Rank 0 calls allgather 'first' then alltoall 'second', rank 1 the other way round:
    # each waits at the call for the other's size (as in Horovod).
    "order": ("Probably the ranks made their calls in different orders: ",
              [("ranks 0 wait in allgather 'first' while ranks 1 submitted alltoall 'second'",
                "same order on every rank"),
               ("ranks 1 wait in alltoall 'second' while ranks 0 submitted allgather 'first'",
                "same order on every rank")]),
}


@pytest.mark.parametrize("mode", sorted(_MISMATCH_HINTS))
def test_mismatched_calls_are_reported_as_such(mode):
    # A hang: the stall warning adds a line saying what the ranks did, and past the shutdown
    # time each rank's error says it too (the worker checks those). Shutdown at 4 s: under
    # load one rank may submit after the first warning (seen once with 2 s), and a later
    # warning must still come before the shutdown.
    out = run_ranks(2, "stall_ops.py", [mode], timeout=240,
                    env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1",
                         "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "4"}).stdout
    start, wanted = _MISMATCH_HINTS[mode]
    hint = out.split(start)
    assert len(hint) >= 2, out
    line = hint[1].splitlines()[0]
    assert any(all(w in line for w in texts) for texts in wanted), out


def test_shutdown_time_below_check_time_is_ignored_with_a_warning():
    # As in Horovod: no shutdown, a warning at start (rank 0 only); the late rank then
    # completes normally.
    out = run_ranks(2, "stall_ops.py", ["warn"], timeout=240,
                    env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "30",
                         "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "1"}).stdout
    lines = log_lines(out)
    assert len(lines) == 1 and lines[0][:2] == ("0", "warning"), out
    assert "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=1.0 is less than HOROVOD_STALL_CHECK_TIME_SECONDS=30.0" in out


def test_stall_in_a_process_set_names_it_and_does_not_stop_the_job(tmp_path):
    # Set {0, 2} of 3 ranks: reports in the job's numbering, a stall shutdown fails only the
    # set's waiting operation (the worker checks the error and that the job goes on).
    timeline = str(tmp_path / "ps.json")
    out = run_ranks(3, "stall_process_set.py", [timeline], timeout=240,
                    env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1",
                         "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "6",
                         "HOROVOD_TIMELINE": timeline}).stdout
    lines = log_lines(out)
    assert lines and all(rank == "0" for rank, _, _ in lines), out
    assert any(lvl == "warning" and msg.startswith("process set 1 (ranks [0, 2]): One or more tensors")
               for _, lvl, msg in lines), out
    assert "allreduce 'ps.late' waited" in out and "missing ranks 2 (submitted by 1 of 2 ranks: 0)" in out
    errors = [msg for _, lvl, msg in lines if lvl == "error"]
    assert len(errors) == 1 and errors[0].startswith("process set 1 (ranks [0, 2]): Stall shutdown: 1 tensor"), errors
    assert "shutting down" not in errors[0]
    # The timeline names the set's rows and shows its ranks in the job's numbering.
    import json
    with open(timeline) as f:
        events = json.load(f)
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert "ps.late [process set 1]" in names.values() and "global.after" in names.values(), names
    late = [k for k, v in names.items() if v == "ps.late [process set 1]"][0]
    ready = [e["args"]["rank"] for e in events if e.get("pid") == late and e["ph"] == "i"]
    assert ready == [0, 2], ready


# Three jobs whose rank 1 (not listed: rank 2) arrives 33 s late, each waiting mostly
# asleep: run at once (about 40 s instead of 2 minutes), each test reads its job's output.
LATE_PEER_JOBS = {"mpi4py": (2, ["33"]), "no-mpi4py": (2, ["33", "no-mpi4py"]),
                  "listed": (3, ["33", "listed"])}


@pytest.fixture(scope="module")
def late_peer_outputs():
    def job(spec):
        np_, args = spec
        return run_ranks(np_, "stall_init_late_peer.py", args, timeout=240,
                         env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1"}).stdout
    with concurrent.futures.ThreadPoolExecutor(len(LATE_PEER_JOBS)) as pool:
        futures = {k: pool.submit(job, spec) for k, spec in LATE_PEER_JOBS.items()}
        return {k: f.result() for k, f in futures.items()}


@pytest.mark.parametrize("mpi4py", [True, False])
def test_ranks_waiting_in_init_for_a_late_peer_say_so_and_then_work(mpi4py, late_peer_outputs):
    # hvd.init() on some ranks only waited in MPI forever without a word. Rank 1 arrives
    # 33 s late: rank 0 warns once (at 30 s, the floor of the interval), then both work.
    # Without mpi4py (which starts MPI at import) MPI starts in hvd.init(), and
    # MPI_Init_thread itself waits for every rank to start MPI: rank 0 waited there,
    # before the barrier that warned, without a word.
    out = late_peer_outputs["mpi4py" if mpi4py else "no-mpi4py"]
    waits = [(rank, line) for rank, level, line in log_lines(out)
             if level == "warning" and "for the other ranks to call hvd.init()" in line]
    assert len(waits) == 1, out
    assert waits[0][0] == "0", waits
    assert "init(): rank 0 of 2 has waited 30 s" in waits[0][1], waits


def test_listed_ranks_waiting_in_init_for_a_late_peer_say_so_and_then_work(late_peer_outputs):
    # The same with hvd.init(comm=[0, 1]) (MPI_Comm_create_group, collective over the
    # listed ranks only): rank 0 waited there forever without a word. Rank 2, not listed,
    # starts its own job at once and says nothing.
    out = late_peer_outputs["listed"]
    waits = [(rank, line) for rank, level, line in log_lines(out)
             if level == "warning" and "for the other listed ranks" in line]
    assert len(waits) == 1, out
    assert waits[0][0] == "0", waits
    assert ("init(): rank 0 has waited 30 s for the other listed ranks to call "
            "hvd.init(comm=[0, 1])") in waits[0][1], waits


def test_init_wait_with_a_huge_check_time_does_not_flood_the_log():
    # HOROVOD_STALL_CHECK_TIME_SECONDS=1e15 (accepted: up to 1e15 s) overflowed the clock's
    # nanoseconds, so the warning came every millisecond (2,419 lines in a 3 s wait).
    out = run_ranks(2, "stall_init_late_peer.py", ["3"], timeout=120,
                    env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1e15"}).stdout
    assert "has waited" not in out, out


def test_a_stopped_rank_is_reported_by_its_peers_then_recovers():
    # SIGSTOP on rank 1 for 6 s: rank 0 waits in the negotiation; it said nothing before.
    out = run_ranks(2, "stall_stopped_rank.py", timeout=240,
                    env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "2"}).stdout
    lines = log_lines(out)
    waits = [m for rank, level, m in lines if rank == "0" and "this rank has waited" in m]
    assert len(waits) >= 2, out  # repeated every check time
    assert all("for the other ranks' background threads" in m and "SIGSTOP" in m for m in waits), waits
    ends = [m for rank, level, m in lines if "completed after" in m]
    assert len(ends) == 1 and "every rank answers again" in ends[0], out
    assert all(rank == "0" and level == "warning" for rank, level, _ in lines), out


@pytest.mark.parametrize("np_, mode, guard", [(2, "raise", False), (3, "os_exit", False),
                                              (2, "raise", True), (3, "left_out", False)])
def test_a_rank_that_exits_before_init_fails_the_others_init(np_, mode, guard):
    # A rank that ended before hvd.init() (an exception at import, os._exit) left the
    # others in init() forever, warning every 30 s that they still waited: Hydra ends a
    # job only when a rank that started MPI exits. Their init() now raises within seconds,
    # naming the rank (the worker checks the text and the time), also with each rank
    # started under the rank guard (one process more between mpirun and the rank). And a
    # rank left out of hvd.init(comm=[0, 1]) that never starts MPI: the text says it must.
    # With two ranks waiting, the first to raise and exit ends the job (it started MPI), and
    # Hydra may kill the other before its own check (up to a second later): at least one
    # waiting rank reports, and none fails otherwise.
    prefix = [sys.executable, GUARD] if guard else []
    proc = run_ranks(np_, "stall_init_exited_peer.py", [mode], timeout=120, expect_ok=False, prefix=prefix)
    out = proc.stdout
    reported = [r for r in range(np_ - 1) if "RANK %d OK" % r in out]
    assert reported if np_ > 2 else reported == [0], out
    assert "AssertionError" not in out and "init() returned" not in out, out
    if mode == "raise":
        assert "a script failing on rank %d before hvd.init()" % (np_ - 1) in out, out
        assert proc.returncode != 0, out
    assert "has waited" not in out, out
