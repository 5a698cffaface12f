"""A tour of mxhorovod's collectives on any number of ranks; each rank checks its results.

    mxhorovodrun -np 2 python examples/collectives.py
    OMP_NUM_THREADS=1 mpirun -np 3 python examples/collectives.py   (2 or more ranks)

The code between the ``# [name]`` and ``# [end]`` comments is shown in the documentation
(docs/collectives.md); tests/docs/test_docs.py runs this file on 2 ranks.
"""
import mxnet as mx
import numpy as np

import mxhorovod as hvd


def main():
    # [init]
    hvd.init(process_sets="dynamic")                 # allow add_process_set later
    rank, size = hvd.rank(), hvd.size()
    # [end]
    if size < 2:
        raise SystemExit("run this on 2 or more ranks")

    # [allreduce]
    x = mx.nd.ones((4,)) * (rank + 1)                # rank r holds r + 1
    mean = hvd.allreduce(x, name="x")                # the mean over the ranks (default)
    total = hvd.allreduce(x, op=hvd.Sum, name="x.sum")
    print("rank %d: mean %s, sum %s" % (rank, mean.asnumpy(), total.asnumpy()))
    # [end]
    np.testing.assert_allclose(mean.asnumpy(), np.full(4, (size + 1) / 2.0))
    np.testing.assert_allclose(total.asnumpy(), np.full(4, size * (size + 1) / 2.0))

    # [broadcast-allgather]
    w = mx.nd.ones((2, 3)) * rank
    w0 = hvd.broadcast(w, root_rank=0, name="w")     # rank 0's values on every rank
    rows = mx.nd.ones((rank + 1, 3)) * rank          # dim 0 may differ between ranks
    gathered = hvd.allgather(rows, name="rows")      # (1 + 2 + ... + size, 3), rank order
    config = hvd.broadcast_object({"lr": 0.1} if rank == 0 else None, root_rank=0)
    # [end]
    np.testing.assert_allclose(w0.asnumpy(), np.zeros((2, 3)))
    want = np.concatenate([np.full((r + 1, 3), r) for r in range(size)])
    np.testing.assert_allclose(gathered.asnumpy(), want)
    assert config == {"lr": 0.1}, config

    # [process-sets]
    evens = hvd.add_process_set(list(range(0, size, 2)))  # every rank calls it alike
    if evens.included():                             # only the set's members call it
        y = hvd.allreduce(x, op=hvd.Sum, name="y", process_set=evens)
        print("rank %d of the set: %s" % (evens.rank(), y.asnumpy()))
    # [end]
        members = list(range(0, size, 2))
        np.testing.assert_allclose(y.asnumpy(), np.full(4, sum(r + 1 for r in members)))
    # [barrier]
    # A rank that ends stops mxhorovod on every rank: the others wait here until the set's
    # members are done.
    hvd.allreduce(mx.nd.zeros((1,)), name="done").wait_to_read()
    # [end]
    print("RANK %d OK" % rank, flush=True)


if __name__ == "__main__":
    main()
