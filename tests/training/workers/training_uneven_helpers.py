"""Automatic collective names match across ranks even when the ranks made different helper
objects first (mxhorovod.common.naming): ranks 0 and 1 train in a process set and call helpers on
it, rank 0 alone makes a DistributedTrainer, a DistributedOptimizer and a kvstore it never
uses; then every rank trains with a global DistributedTrainer, a DistributedOptimizer and
kvstore='horovod', and calls the helpers and unnamed collectives globally. Each result is
checked against one process on the concatenated batch (no hang: the names were once
numbered per process in creation order). Prints RANK <r> OK."""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxhorovod as hvd
from training_common import assert_close, copy_params, global_data, mlp, param_arrays

pair = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[pair])
r, n = hvd.rank(), hvd.size()
STEPS, B, LR = 3, 4, 0.1
x, y = global_data(STEPS, B)  # every rank: (steps, n*B, IN)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()


def train(net, trainer, rows, batch=None):
    for s in range(STEPS):
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x[s, rows])), mx.nd.array(y[s, rows]))
        loss.backward()
        trainer.step(batch or rows.stop - rows.start)
    return param_arrays(net)


def twin(net):
    """A copy of net's current values, for the one-process reference."""
    ref = mlp(net.prefix + "ref_")
    copy_params(net, ref)
    return ref


def reference(ref, rows):
    return train(ref, gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": LR}), rows)


mine = slice(r * B, (r + 1) * B)
if pair.included():  # the set's own trainer, optimizer, helpers and unnamed collectives
    net = mlp("pair_")
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)  # global: every rank calls it
    ref = twin(net)
    got = train(net, hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": LR},
                                            process_set=pair), mine)
    assert_close(got, reference(ref, slice(0, 2 * B)), LR, "trainer of the pair")
    net = mlp("pairopt_")
    start = hvd.broadcast_object(param_arrays(net), root_rank=0, process_set=pair)
    for p, v in zip(net.collect_params().values(), start):
        p.set_data(mx.nd.array(v))
    ref = twin(net)
    opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=LR), process_set=pair)
    got = train(net, gluon.Trainer(net.collect_params(), opt, kvstore=None), mine)
    assert_close(got, reference(ref, slice(0, 2 * B)), LR, "optimizer of the pair")
    assert hvd.allgather_object(r, process_set=pair) == [0, 1]
    s = hvd.allreduce(mx.nd.ones((2,)) * (r + 1), op=hvd.Sum, process_set=pair)
    np.testing.assert_array_equal(s.asnumpy(), [3, 3])
else:
    hvd.broadcast_parameters(mlp("pair_").collect_params(), root_rank=0)
if r == 0:  # made, never used
    spare = mlp("spare_")
    hvd.DistributedTrainer(spare.collect_params(), "sgd", {"learning_rate": LR})
    hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=LR))
    mx.kv.create("horovod")

# Every rank: global trainer, optimizer, kvstore, helpers and unnamed collectives.
for case in ("trainer", "optimizer", "kvstore"):
    net = mlp("all_%s_" % case)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    ref = twin(net)
    if case == "trainer":
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": LR})
    elif case == "optimizer":
        trainer = gluon.Trainer(net.collect_params(),
                                hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=LR)),
                                kvstore=None)
    else:
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR},
                                kvstore="horovod")
    # kvstore='horovod' sums, as dist_sync does: step() takes the global batch size.
    got = train(net, trainer, mine, n * B if case == "kvstore" else None)
    assert_close(got, reference(ref, slice(0, n * B)), LR, "global " + case)
assert hvd.broadcast_object("from %d" % r, root_rank=1) == "from 1"
assert hvd.allgather_object(r) == list(range(n))
s = hvd.allreduce(mx.nd.ones((2,)) * (r + 1), op=hvd.Sum)
np.testing.assert_array_equal(s.asnumpy(), [n * (n + 1) / 2] * 2)
assert hvd.allreduce(mx.nd.ones((1,)), op=hvd.Sum, name="done").asscalar() == n
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
