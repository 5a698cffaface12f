"""A peer stops mxhorovod while the others wait on collectives it never submits
(argv[1]: 'shutdown' calls hvd.shutdown(), 'exit' just ends its script, so the exit hook
shuts down). The waiting ranks get an error naming their pending tensors and the rank that
shut down; every process ends normally. The stopping rank is 1. Prints RANK <r> OK."""
import sys
import time

import mxnet as mx
from mxnet.base import MXNetError

import mxhorovod as hvd

mode = sys.argv[1]
hvd.init()
r, n = hvd.rank(), hvd.size()
hvd.allreduce(mx.nd.ones(1), name="barrier").asnumpy()

if r == 1:
    time.sleep(1.0)  # the others are waiting by now
    if mode == "shutdown":
        hvd.shutdown()
        assert not hvd.is_initialized()
    print("RANK %d OK" % r, flush=True)
    sys.exit(0)  # 'exit': the exit hook shuts mxhorovod down

t0 = time.time()
a = hvd.allreduce(mx.nd.ones((4,)), name="waits.a.%d" % r)
b = hvd.broadcast(mx.nd.ones((2,)), root_rank=0, name="waits.b.%d" % r)
for arr, mine in ((a, "allreduce 'waits.a.%d'" % r), (b, "broadcast 'waits.b.%d'" % r)):
    try:
        arr.asnumpy()
        raise AssertionError("no error for " + mine)
    except MXNetError as e:
        msg = str(e)
        for needle in (mine, "did not run", "a peer rank shut down mxhorovod (rank 1: hvd.shutdown() or process exit)",
                       "which stops it on every rank", "process sets it is not in",
                       "pending on this rank: allreduce 'waits.a.%d', broadcast 'waits.b.%d'" % (r, r)):
            assert needle in msg, "expected %r in: %s" % (needle, msg)
assert time.time() - t0 < 60
assert not hvd.is_initialized()
assert hvd.rank() == r  # as in Horovod, the topology still answers after a peer's shutdown
# Every entry point says why it stopped (the trainer and allgather said only "not
# initialized; use hvd.init()").
net = mx.gluon.nn.Dense(1, in_units=1)
net.initialize()
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd")
with mx.autograd.record():
    loss = net(mx.nd.ones((1, 1))).sum()
loss.backward()
for call in (lambda: hvd.allreduce(mx.nd.ones(2), name="after"),
             lambda: hvd.allgather(mx.nd.ones(2), name="after.ag"),
             lambda: trainer.step(1)):
    try:
        call()
        raise AssertionError("a call was accepted after the peer's shutdown stopped this rank")
    except ValueError as e:
        assert "a peer rank shut down mxhorovod (rank 1:" in str(e), str(e)
        assert "every rank must stay until the job's last collective" in str(e), str(e)
print("RANK %d OK" % r, flush=True)
