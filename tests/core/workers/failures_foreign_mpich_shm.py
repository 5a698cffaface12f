"""MPICH's shared-memory file of the host is another user's (MPICH opened a name that user
made first): hvd.init() must refuse on every rank. mpi4py starts MPI first; then rank 0
gives the file it maps to another uid (root's chown stands in for the other user), and
every rank calls init(), which must raise naming the file and its owner."""
import os

from mpi4py import MPI

import mxhorovod as hvd

comm = MPI.COMM_WORLD
paths = sorted({line.split(None, 5)[5].strip() for line in open("/proc/self/maps")
                if "/dev/shm/mpich_shm_" in line and "(deleted)" not in line})
if comm.rank == 0:
    for path in paths:
        os.chown(path, 54321, 54321)
comm.Barrier()
try:
    hvd.init()
except Exception as e:  # noqa: BLE001 (its text is checked)
    text = str(e)
    assert "another local user made its name" in text, text
    if paths:  # (no file: MPICH uses no shared memory here; every rank still agrees)
        assert "belongs to uid 54321 (mode 0600)" in text and paths[0] in text, text
    print("RANK %d OK" % comm.rank, flush=True)
else:
    print("RANK %d INIT PASSED %s" % (comm.rank, paths), flush=True)
