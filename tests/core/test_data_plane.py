"""The data plane within a host (src/ops/): the cross-memory attach path agreed by every rank,
its read failures, shared regions and staging, and the doorbell that wakes late ranks
(tests/core/workers/data_plane_*.py)."""
import os
import subprocess
import sys
import time

import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("case,np_,want", [
    ("sets", 3, ["process set 0 (ranks [0, 1, 2]): allreduce of 65536 bytes and more by cross-memory attach",
                 "process set 1 (ranks [0, 1]): allreduce of 65536 bytes and more by cross-memory attach"]),
    ("off1", 2, ["process set 0 (ranks [0, 1]): allreduce through MPI only: MXHOROVOD_CMA=0 on ranks 1"]),
    ("minmix", 3, ["process set 0 (ranks [0, 1, 2]): allreduce of 786432 bytes and more by cross-memory attach"]),
])
def test_cma_path_agreed_by_every_rank(case, np_, want):
    proc = run_ranks(np_, "data_plane_cma_choice.py", [case], timeout=240, env={"HOROVOD_LOG_LEVEL": "debug"})
    for line in want:
        for r in range(np_ if line.startswith("process set 0") else 2):
            assert "[%d]<debug>" % r in proc.stdout
            assert any(l.startswith("[%d]<debug>" % r) and line in l
                       for l in proc.stdout.splitlines()), (r, line, proc.stdout[-4000:])


def test_cma_read_failure_names_tensor_and_job_ranks():
    run_ranks(3, "data_plane_cma_unreadable.py", timeout=240)


@pytest.mark.parametrize("np_", [2, 3])
def test_allreduce_of_shared_regions_reads_peers_through_mappings(np_):
    # DistributedTrainer's buckets: arrays in memfd regions that the peers map.
    run_ranks(np_, "data_plane_shared_regions.py", timeout=240)


@pytest.mark.parametrize("np_", [2, 3])
def test_allreduce_of_mxnet_arrays_reads_peers_through_their_staging(np_):
    # Groups of 64 KiB and more: each rank stages what its peers read in a region they map.
    run_ranks(np_, "data_plane_staging.py", timeout=240)


def _bells():
    return {f for f in os.listdir("/dev/shm") if f.startswith("mxhorovod-bell-")} \
        if os.path.isdir("/dev/shm") else set()


@pytest.mark.parametrize("case,np_", [("default", 2), ("default", 3), ("default", 4), ("off1", 2)])
def test_doorbell_waits_wake_whoever_is_late(case, np_):
    before = _bells()
    proc = run_ranks(np_, "data_plane_doorbell.py", [case], timeout=240, env={"HOROVOD_LOG_LEVEL": "debug"})
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
        proc = run_ranks(2, "data_plane_doorbell.py", ["default"], timeout=240, env={"HOROVOD_LOG_LEVEL": "debug"})
        assert not os.path.exists(paths["stale"]), proc.stdout[-3000:]
        assert "removed %s, a doorbell file left by the dead process %d" % (paths["stale"], dead) \
            in proc.stdout, proc.stdout[-3000:]
        for k in ("recent", "alive", "foreign"):
            assert os.path.exists(paths[k]), (k, proc.stdout[-3000:])
    finally:
        for path in paths.values():
            if os.path.exists(path):
                os.unlink(path)


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
    proc = run_ranks(2, "data_plane_doorbell_full_shm.py", timeout=180, outer=_SMALL_SHM,
                     env={"HOROVOD_LOG_LEVEL": "debug"})
    lines = [l for l in proc.stdout.splitlines() if "doorbell: " in l]
    assert len(lines) == 2 and all("not on every rank" in l for l in lines), proc.stdout[-3000:]
