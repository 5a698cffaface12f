"""init() refused on every rank (argv[1]: 'bad', an unreadable HOROVOD_CYCLE_TIME on every
rank; 'disagree', HOROVOD_FUSION_THRESHOLD different on each rank), unhandled: the
excepthook ends the job with MPI_Abort. MPI was already running (init() refuses after
starting it), so MPICH's /dev/shm/mpich_shm_* file existed; each such job left one behind
(the abort unlinked it only once init() had succeeded). The script's own excepthook, which
mxhorovod's chains to before the abort, prints the files this rank maps as <path>."""
import os
import sys


def _print_shm(exc_type, exc, tb):
    shm = sorted({line.split(None, 5)[5].strip().replace(" (deleted)", "")
                  for line in open("/proc/self/maps") if "/dev/shm/mpich_shm_" in line})
    print("WORKER SHM %s" % " ".join("<%s>" % f for f in shm), flush=True)
    sys.__excepthook__(exc_type, exc, tb)


sys.excepthook = _print_shm  # before the import: mxhorovod's hook calls it, then aborts

import mxhorovod as hvd  # noqa: E402

rank = int(os.environ.get("PMI_RANK", "0"))
if sys.argv[1] == "bad":
    os.environ["HOROVOD_CYCLE_TIME"] = "abc"
else:
    os.environ["HOROVOD_FUSION_THRESHOLD"] = str(1 << (20 + rank))
hvd.init()
print("RANK %d OK" % hvd.rank(), flush=True)  # not reached
