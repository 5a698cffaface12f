"""A process forked from the rank before hvd.init() inherits mpirun's connection (PMI_FD);
MPI_Init in it and in the rank ended the job in MPI_Init_thread (UCX "failed to unpack
address", MPI_Abort). The first to start MPI keeps the connection; the other's init() now
raises ValueError naming the owner. Modes (argv[1]):

parent_first: the rank forks a child (multiprocessing, 'fork'), calls hvd.init() and a
    collective, then lets the child call hvd.init(): the child's init() raises, the rank's
    job goes on.
child_first: the forked child calls hvd.init() and a collective (the children form the
    job), exits; then the rank's own init() raises. The last rank ends 2 s after the others.
Prints RANK <r> OK."""
import multiprocessing as mp
import os
import sys
import time

import mxnet as mx

import mxhorovod as hvd

mode = sys.argv[1]
world_rank, world_size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
WANT = "this rank's connection to mpirun (PMI_FD="


def child(go, q):
    go.wait()
    try:
        hvd.init()
        got = hvd.allreduce(mx.nd.ones((2,)) * hvd.rank(), op=hvd.Sum, name="child").asnumpy()
        q.put(("ok", hvd.rank(), float(got[0])))
    except ValueError as e:
        q.put(("refused", str(e), None))


ctx = mp.get_context("fork")
go, q = ctx.Event(), ctx.Queue()
proc = ctx.Process(target=child, args=(go, q))
proc.start()
if mode == "parent_first":
    hvd.init()
    got = hvd.allreduce(mx.nd.ones((2,)) * hvd.rank(), op=hvd.Sum, name="parent").asnumpy()
    assert got[0] == world_size * (world_size - 1) / 2, got
    go.set()
    kind, text, _ = q.get(timeout=60)
    proc.join(30)
    assert kind == "refused", (kind, text)
    assert WANT in text and "already used to start MPI by process %d" % os.getpid() in text, text
    # The rank's job goes on.
    got = hvd.allreduce(mx.nd.ones((2,)), name="after").asnumpy()
    assert (got == 1).all(), got
else:
    go.set()
    kind, rank, value = q.get(timeout=60)
    proc.join(30)
    assert kind == "ok" and rank == world_rank and value == world_size * (world_size - 1) / 2, (
        kind, rank, value)
    try:
        hvd.init()
    except ValueError as e:
        assert WANT in str(e), str(e)
        assert "already used to start MPI by process %d (since exited)" % proc.pid in str(e), str(e)
    else:
        raise AssertionError("the rank's init() started MPI a second time")
    if world_rank == world_size - 1:
        # The last rank ends 2 s after the others: when the first rank exited, mpirun took
        # it for crashed (its child ended by os._exit() without telling mpirun that MPI was
        # finalized) and killed this one by SIGKILL, before it printed OK.
        time.sleep(2)
print("RANK %d OK" % world_rank, flush=True)
