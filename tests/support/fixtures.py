"""Fixtures shared by every folder: mxhorovod started in pytest's own process (size 1), and
the session's cleanup of MPICH's leftover shared-memory files. Loaded by tests/conftest.py."""
import glob
import os

import pytest


@pytest.fixture
def hvd_single():
    """mxhorovod started in this process (size 1) for one test, shut down after it."""
    import mxhorovod as hvd  # here: the launcher's tests never import mxhorovod
    hvd.init()
    try:
        yield
    finally:
        hvd.shutdown()


def _shm_in_use():
    """The /dev/shm paths that some running process maps or holds open."""
    used = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/maps" % pid) as f:  # the path: from "/dev/shm/" to the end
                used.update(line[line.index("/dev/shm/"):].rstrip("\n") for line in f
                            if "/dev/shm/" in line)
            fds = "/proc/%s/fd" % pid
            used.update(os.readlink(os.path.join(fds, fd)) for fd in os.listdir(fds))
        except OSError:  # gone, or not ours to read
            continue
    return used


@pytest.fixture(scope="session", autouse=True)
def remove_leftover_mpich_shm():
    """The failure tests kill ranks on purpose, and MPICH leaves the shared-memory file of a
    rank that dies without MPI_Finalize in /dev/shm (memory) until a reboot: at the end of
    the session, the mpich_shm_* files that appeared during it and that no running process
    uses are removed (77 MB were left by one run of the suite)."""
    before = set(glob.glob("/dev/shm/mpich_shm_*"))
    yield
    new = set(glob.glob("/dev/shm/mpich_shm_*")) - before
    for path in (new - _shm_in_use()) if new else ():
        try:
            os.unlink(path)
        except OSError:
            pass
