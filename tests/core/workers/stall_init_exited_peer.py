"""The last rank ends before hvd.init() (argv[1]: 'raise', an unhandled exception before it
imports mxhorovod; 'os_exit', os._exit(0); 'left_out', a normal exit of a rank the others
leave out of hvd.init(comm=[...]) but which never starts MPI): the other ranks waited in init() forever (in
MPI_Init_thread, which waits for every rank of the job; Hydra ends a job only when a rank
that started MPI exits), warning every 30 s that they still wait. Now their init() raises,
within seconds, naming the exited rank; they check the text, print RANK <r> OK and end
normally. The first waiting rank to end this way ends the job (it started MPI): Hydra may
kill the others before they report (the exit must not wait for the background thread, left blocked in MPI)."""
import os
import re
import sys
import time

mode = sys.argv[1]
world_rank, world_size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
last = world_size - 1
if world_rank == last:
    if mode == "raise":
        raise RuntimeError("a script failing on rank %d before hvd.init()" % world_rank)
    if mode == "left_out":
        sys.exit(0)
    os._exit(0)

import mxhorovod as hvd  # noqa: E402

t0 = time.time()
try:
    hvd.init(comm=list(range(last)) if mode == "left_out" else None)
except ValueError as e:
    text = str(e)
else:
    raise AssertionError("init() returned with rank %d gone" % last)
waited = time.time() - t0
# The exited ranks: the last one, and any waiting rank that raised here first and ended.
found = re.search(r"init\(\): ranks? ([\d, ]+) of %d ha(?:s|ve) exited without completing hvd.init\(\), "
                  r"while rank %d of %d waited" % (world_size, world_rank, world_size), text)
assert found and str(last) in found.group(1).split(", "), text
want = found.group(0)
# What a rank left out of init(comm=[...]) lacks (the text said only "every rank of the
# job must call hvd.init()").
assert "a rank left out of init(comm=[...]) must still start MPI, as importing mpi4py does" \
    in text, text
assert waited < 20, waited
# Later calls say the same instead of starting again (the thread is still blocked in MPI).
try:
    hvd.init(comm=list(range(last)) if mode == "left_out" else None)
except ValueError as e:
    assert want in str(e), str(e)
else:
    raise AssertionError("a second init() returned")
assert not hvd.is_initialized()
print("RANK %d OK (init() failed after %.1f s)" % (world_rank, waited), flush=True)
