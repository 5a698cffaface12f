"""hvd.init() in a process that a rank started with multiprocessing 'spawn' (not by mpirun):
it inherits PMI_FD but not the descriptor, and init() raises a ValueError naming PMI_FD and
'spawn' (before: MPICH aborted the child with 'PMI_Init returned -1', its parent waiting for
an answer; with a file open at that number, the launcher's protocol was written into it).
Argument: "before" or "after" (the rank's own init() relative to starting the child).
The rank's own job is unharmed. Prints RANK <r> OK."""
import multiprocessing as mp
import os
import sys
import tempfile


def child(q, at_fd):
    import mxhorovod as hvd
    path = None
    if at_fd:  # a file of the child's own at PMI_FD's number
        fd = int(os.environ["PMI_FD"])
        tmp, path = tempfile.mkstemp()
        os.dup2(tmp, fd)
    try:
        hvd.init()
        q.put("init returned: rank %d of %d" % (hvd.rank(), hvd.size()))
    except ValueError as e:
        q.put("ValueError: %s%s" % (e, " [file size %d]" % os.path.getsize(path) if path else ""))
    finally:
        if path:
            os.unlink(path)


if __name__ == "__main__":
    import mxnet as mx
    import numpy as np

    import mxhorovod as hvd

    assert os.environ.get("PMI_FD"), "run under MPICH's mpirun"
    if sys.argv[1] == "after":
        hvd.init()
    ctx = mp.get_context("spawn")
    for at_fd in [False, True]:
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q, at_fd))
        p.start()
        text = q.get(timeout=120)
        p.join(60)
        assert p.exitcode == 0, (p.exitcode, text)
        assert text.startswith("ValueError: hvd.init(): PMI_FD="), text
        assert "not started by mpirun" in text and "'spawn'" in text, text
        if at_fd:
            assert "not as a socket" in text and text.endswith("[file size 0]"), text
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    out = hvd.allreduce(mx.nd.ones((4,)) * (r + 1), op=hvd.Sum, name="x").asnumpy()
    assert np.all(out == n * (n + 1) / 2), out
    print("RANK %d OK" % r, flush=True)
