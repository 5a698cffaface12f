"""Multi-rank tests of the core: every worker asserts its values on its own rank and prints
RANK <r> OK; run_ranks fails the test on a missing rank, a non-zero exit or a timeout."""
import os
import subprocess
import sys
import time

import pytest

from mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_collectives_every_dtype_and_op(np_):
    run_ranks(np_, "core_collectives.py", timeout=240)


def test_collectives_small_fusion_buffer_and_slices():
    # Fusion threshold below the big tensor, MPI calls sliced at 64 KiB, and the data calls
    # MPI's blocking ones (MXHOROVOD_BLOCKING_DATA=1; not the default).
    run_ranks(2, "core_collectives.py", timeout=240,
              env={"HOROVOD_FUSION_THRESHOLD": str(1 << 20), "MXHOROVOD_SLICE_BYTES": str(1 << 16),
                   "MXHOROVOD_BLOCKING_DATA": "1"})


@pytest.mark.parametrize("np_", [2, 3])
def test_collectives_every_size_through_cma(np_):
    # Every allreduce by cross-memory attach, down to 1 element (blocks of 0 elements on
    # some ranks), fused or alone.
    run_ranks(np_, "core_collectives.py", timeout=240, env={"MXHOROVOD_CMA_MIN_BYTES": "0"})


@pytest.mark.parametrize("np_", [2, 3])
def test_allreduce_of_shared_regions_reads_peers_through_mappings(np_):
    # DistributedTrainer's buckets: arrays in memfd regions that the peers map.
    run_ranks(np_, "core_shared_regions.py", timeout=240)


@pytest.mark.parametrize("np_", [2, 3])
def test_allreduce_of_mxnet_arrays_reads_peers_through_their_staging(np_):
    # Groups of 64 KiB and more: each rank stages what its peers read in a region they map.
    run_ranks(np_, "core_staging.py", timeout=240)


@pytest.mark.parametrize("np_,env", [
    (2, {}), (3, {}), (3, {"MXHOROVOD_CMA": "0"}), (3, {"HOROVOD_HIERARCHICAL_ALLREDUCE": "1"}),
])
def test_min_max_nan_and_signed_zero_same_on_every_rank(np_, env):
    run_ranks(np_, "core_minmax_nan.py", timeout=240, env=env)


def test_collectives_through_mpi_only():
    run_ranks(3, "core_collectives.py", timeout=240, env={"MXHOROVOD_CMA": "0"})


@pytest.mark.parametrize("case,np_,want", [
    ("sets", 3, ["process set 0 (ranks [0, 1, 2]): allreduce of 65536 bytes and more by cross-memory attach",
                 "process set 1 (ranks [0, 1]): allreduce of 65536 bytes and more by cross-memory attach"]),
    ("off1", 2, ["process set 0 (ranks [0, 1]): allreduce through MPI only: MXHOROVOD_CMA=0 on ranks 1"]),
    ("minmix", 3, ["process set 0 (ranks [0, 1, 2]): allreduce of 786432 bytes and more by cross-memory attach"]),
])
def test_cma_path_agreed_by_every_rank(case, np_, want):
    proc = run_ranks(np_, "core_cma_choice.py", [case], timeout=240, env={"HOROVOD_LOG_LEVEL": "debug"})
    for line in want:
        for r in range(np_ if line.startswith("process set 0") else 2):
            assert "[%d]<debug>" % r in proc.stdout
            assert any(l.startswith("[%d]<debug>" % r) and line in l
                       for l in proc.stdout.splitlines()), (r, line, proc.stdout[-4000:])


def test_cma_read_failure_names_tensor_and_job_ranks():
    run_ranks(3, "core_cma_unreadable.py", timeout=240)


def test_collectives_without_cache_or_fusion():
    run_ranks(3, "core_collectives.py", timeout=240,
              env={"HOROVOD_CACHE_CAPACITY": "0", "HOROVOD_FUSION_THRESHOLD": "0"})


def test_collectives_tiny_cache_evicts():
    # 4 entries for hundreds of names: constant eviction must keep every rank's cache equal.
    for capacity in ("1", "4"):
        run_ranks(3, "core_collectives.py", timeout=240, env={"HOROVOD_CACHE_CAPACITY": capacity})


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_errors_late_rank_and_restart(np_):
    run_ranks(np_, "core_errors.py", timeout=240)


@pytest.mark.parametrize("np_", [2, 3])
def test_calls_of_one_name_are_matched_in_call_order(np_):
    run_ranks(np_, "core_call_order.py", timeout=180)


def test_thousands_of_calls_of_one_name_in_flight_and_at_shutdown():
    run_ranks(2, "core_call_order_many.py", timeout=180)


def test_a_new_name_per_call_keeps_bounded_state():
    run_ranks(2, "many_names.py", timeout=240)


def test_many_names_waiting_for_a_late_rank_complete_in_linear_time():
    run_ranks(2, "many_pending.py", timeout=240)


@pytest.mark.parametrize("np_", [2, 3])
def test_naive_engine_errors_raise_at_the_call(np_):
    run_ranks(np_, "naive_engine.py", timeout=180, env={"MXNET_ENGINE_TYPE": "NaiveEngine"})


@pytest.mark.parametrize("np_", [2, 3])
def test_collective_skipped_after_a_failed_input_fails_everywhere(np_):
    run_ranks(np_, "skipped_input.py", timeout=180)


@pytest.mark.parametrize("np_,engine", [(2, None), (3, None), (2, "NaiveEngine")])
def test_arrays_dropped_after_the_call(np_, engine):
    # Push borrows the caller's handles when MXNet runs the operation during the push and
    # copies them when it waits: results right on every rank either way.
    env = {"MXNET_ENGINE_TYPE": engine} if engine else None
    run_ranks(np_, "dropped_arrays.py", timeout=180, env=env)


@pytest.mark.parametrize("np_,engine", [(2, None), (3, None), (2, "NaiveEngine")])
def test_call_refused_on_one_rank_fails_the_peers_call(np_, engine):
    env = {"MXNET_ENGINE_TYPE": engine} if engine else None
    run_ranks(np_, "refused_on_one_rank.py", timeout=180, env=env)


@pytest.mark.parametrize("np_", [2, 3])
def test_mkldnn_layout_weights(np_):
    run_ranks(np_, "core_mkldnn.py", timeout=180)


def test_init_on_subcommunicators_beside_mpi4py():
    # The stall shutdown turns a mismatch of automatic names into an error, not a hang.
    run_ranks(4, "core_comm.py", timeout=180,
              env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "3",
                   "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "6"})


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_process_sets_reducescatter_grouped_allgather(np_):
    run_ranks(np_, "core_process_sets.py", timeout=240,
              env={"HOROVOD_DYNAMIC_PROCESS_SETS": "1"})


def test_unnamed_calls_on_sets_removed_and_on_ids_given_again_after_reinit():
    # The stall shutdown turns a mismatch of automatic names into an error, not a hang.
    run_ranks(3, "process_set_names.py", timeout=180,
              env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "3",
                   "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "6"})


@pytest.mark.parametrize("np_", [2, 3])
def test_unnamed_calls_refused_while_stopped_take_no_number(np_):
    # Refused before init() / after shutdown() on some ranks only; the stall shutdown turns
    # a mismatch of automatic names into an error, not a hang.
    run_ranks(np_, "unnamed_while_stopped.py", timeout=180,
              env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "3",
                   "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "6"})


@pytest.mark.parametrize("worker,steps_per_sample", [
    ("core_autotune.py", "2"),            # tries every candidate, results stay right
    ("core_autotune_new_names.py", "1"),  # samples when no name comes round again
])
def test_autotune(tmp_path, worker, steps_per_sample):
    log = tmp_path / "autotune.csv"
    run_ranks(2, worker, [str(log)], timeout=240,
              env={"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": str(log),
                   "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "0",
                   "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": steps_per_sample})


@pytest.mark.parametrize("blocking,cma", [("1", "1"), ("0", "1"), ("1", "0")])
def test_scaled_sum_agreed_in_process_sets(blocking, cma):
    # MPICH's ring algorithms split the reduction between the ranks, so any disagreement
    # on the op (scaled inside the reduction or not) shows as wrong numbers.
    run_ranks(3, "scaled_sum_sets.py", timeout=240,
              env={"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring",
                   "MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM": "tsp_ring",
                   "MXHOROVOD_BLOCKING_DATA": blocking, "MXHOROVOD_CMA": cma})


def _available_gib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return 0.0


@pytest.mark.parametrize("case,np_", [("allgather", 3), ("alltoall", 2)])
def test_collectives_over_2_gib_per_mpi_call(case, np_):
    # About 4.3 GiB per rank: opt-in, and only where the memory is free.
    import os
    if os.environ.get("MXHOROVOD_TEST_BIG") != "1":
        pytest.skip("set MXHOROVOD_TEST_BIG=1 to run (about %d GiB of memory)" % (5 * np_))
    if _available_gib() < 5 * np_:
        pytest.skip("needs about %d GiB of available memory, %.1f GiB here"
                    % (5 * np_, _available_gib()))
    run_ranks(np_, "core_big_counts.py", [case], timeout=600)


@pytest.mark.parametrize("np_", [2, 3])
def test_settings_that_decide_the_mpi_calls_must_agree(np_):
    # Fusion threshold, cache capacity, slice and zero-copy sizes, autotune and dynamic
    # process sets differing on rank 0: init() fails on every rank naming the variable;
    # blocking data calls on some ranks only are agreed (right values, no hang); a value one
    # rank cannot read fails init() on every rank, naming that rank and the variable.
    run_ranks(np_, "settings_agree.py", timeout=240)


def test_refused_init_then_a_normal_exit():
    # init() refused after MPI started, rank 0 ending first: exit status 0, every rank done.
    run_ranks(3, "init_refused_exit.py", timeout=120)


def test_init_and_shutdown_from_several_threads_at_once():
    # Four threads call init() together, then three shutdown(): all return (they waited
    # forever), the job works.
    run_ranks(2, "init_threads.py", timeout=120)


@pytest.mark.parametrize("when", ["before", "after"])
def test_init_in_a_spawned_child_raises_naming_pmi_fd(when):
    # A multiprocessing 'spawn' child of a rank calling hvd.init(): a clear ValueError, and
    # a file at PMI_FD's number untouched (it was MPICH's abort of the child); the job runs.
    run_ranks(2, "init_in_spawned_child.py", [when], timeout=240)


def test_process_sets_from_mpi4py_communicators():
    # Horovod's Split pattern (MPI.COMM_NULL outside the set), at init and added later, and
    # a set's ranks counted in the job given to init(comm=...).
    run_ranks(4, "process_set_comms.py", timeout=240)


def _bells():
    return {f for f in os.listdir("/dev/shm") if f.startswith("mxhorovod-bell-")} \
        if os.path.isdir("/dev/shm") else set()


@pytest.mark.parametrize("case,np_", [("default", 2), ("default", 3), ("default", 4), ("off1", 2)])
def test_doorbell_waits_wake_whoever_is_late(case, np_):
    before = _bells()
    proc = run_ranks(np_, "doorbell.py", [case], timeout=240, env={"HOROVOD_LOG_LEVEL": "debug"})
    on = "doorbell: every rank of the job can wake every other"
    lines = [l for l in proc.stdout.splitlines() if "doorbell: " in l]
    assert len(lines) == np_, proc.stdout[-3000:]
    assert all((on in l) == (case == "default") for l in lines), lines
    # The file is unlinked once every rank has mapped it: nothing is left in /dev/shm (a
    # name seen here may be another job's, between its creation and unlinking: look twice).
    left = _bells() - before
    if left:
        time.sleep(2)
        assert not (_bells() & left), left


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_doorbell_files_of_dead_jobs_are_removed_at_init():
    # A job killed between making its bell file and unlinking it left the file for good. Now
    # the name carries the creator's pid and init() removes the files of dead pids older
    # than a minute, and only those.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead, alive = child.pid, os.getpid()
    old = time.time() - 600
    files = {"stale": ("mxhorovod-bell-%d-tst%03d" % (dead, alive % 1000), old),
             "recent": ("mxhorovod-bell-%d-tsu%03d" % (dead, alive % 1000), None),
             "alive": ("mxhorovod-bell-%d-tsv%03d" % (alive, alive % 1000), old),
             "foreign": ("mxhorovod-bell-x%d" % alive, old)}
    paths = {k: os.path.join("/dev/shm", name) for k, (name, _) in files.items()}
    try:
        for k, (_, mtime) in files.items():
            open(paths[k], "w").close()
            if mtime:
                os.utime(paths[k], (mtime, mtime))
        proc = run_ranks(2, "doorbell.py", ["default"], timeout=240, env={"HOROVOD_LOG_LEVEL": "debug"})
        assert not os.path.exists(paths["stale"]), proc.stdout[-3000:]
        assert "removed %s, a doorbell file left by the dead process %d" % (paths["stale"], dead) \
            in proc.stdout, proc.stdout[-3000:]
        for k in ("recent", "alive", "foreign"):
            assert os.path.exists(paths[k]), (k, proc.stdout[-3000:])
    finally:
        for path in paths.values():
            if os.path.exists(path):
                os.unlink(path)


@pytest.mark.parametrize("np_,env", [
    (2, {}), (3, {}), (2, {"MXNET_ENGINE_TYPE": "NaiveEngine"}), (3, {"HOROVOD_CACHE_CAPACITY": "0"}),
])
def test_grouped_call_of_different_lengths_fails_on_every_rank(np_, env):
    # grouped_allreduce / grouped_reducescatter with a list one rank shorter: every rank
    # raises 'Mismatched numbers of tensors' (the shorter rank used to go on, the others to
    # wait forever), and the same names work again afterwards. An empty list on one rank
    # (grouped_allgather too): that rank gets [] at once, the peers the error (they used to
    # wait forever); empty on every rank: [] everywhere; unnamed calls stay in step.
    run_ranks(np_, "group_size_mismatch.py", timeout=180, env=env)


@pytest.mark.parametrize("np_,engine,mode", [(2, None, ""), (3, None, ""), (2, "NaiveEngine", ""),
                                             (3, None, "np")])
def test_collectives_inside_autograd_record_are_differentiated(np_, engine, mode):
    # allreduce (Sum/Average, scale factors), allgather (uneven), broadcast, reducescatter,
    # alltoall: the inputs' gradients of the sum of every rank's loss (they were zero), and a
    # mean over all ranks inside the loss trains as one process on the concatenated batch.
    env = {"MXNET_ENGINE_TYPE": engine} if engine else None
    run_ranks(np_, "autograd_collectives.py", [mode] if mode else [], timeout=180, env=env)


# The job in a mount namespace of its own, with a small tmpfs as /dev/shm (needs root).
_SMALL_SHM = ["unshare", "-m", "sh", "-c",
              'mount -t tmpfs -o size=32M tmpfs /dev/shm && exec "$@"', "sh"]


def _small_shm_unavailable():
    try:
        proc = subprocess.run(_SMALL_SHM + ["true"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    return proc.stdout.strip() or "exit %d" % proc.returncode if proc.returncode else None


def test_doorbell_on_a_full_dev_shm_goes_without():
    # /dev/shm full at init(): no doorbell, the right results (it was SIGBUS on every rank).
    why = _small_shm_unavailable()
    if why:
        pytest.skip("no mount namespace with a tmpfs /dev/shm here: " + why)
    proc = run_ranks(2, "doorbell_full_shm.py", timeout=180, outer=_SMALL_SHM,
                     env={"HOROVOD_LOG_LEVEL": "debug"})
    lines = [l for l in proc.stdout.splitlines() if "doorbell: " in l]
    assert len(lines) == 2 and all("not on every rank" in l for l in lines), proc.stdout[-3000:]
