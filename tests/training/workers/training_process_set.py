"""DistributedTrainer and DistributedOptimizer within a process set: ranks 0 and 1 train
together (with and without bucket views), the other ranks train alone meanwhile with the
same trainer and optimizer wrapper over the pair (which reduce nothing there, as in
Horovod); each member ends equal to one process trained on the members' concatenated
batches, each other rank equal to a plain Trainer on its own batch, and
broadcast_object / allgather_object stay within the set. Prints RANK <r> OK."""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxhorovod as hvd
from training_common import IN, assert_close, copy_params, global_data, mlp, param_arrays

pair = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[pair])
r, n = hvd.rank(), hvd.size()
STEPS, B, LR = 4, 4, 0.1
x, y = global_data(STEPS, B)  # every rank: (steps, n*B, IN)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
members = [0, 1]


def train(net, trainer, rows):
    for s in range(STEPS):
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x[s, rows])), mx.nd.array(y[s, rows]))
        loss.backward()
        trainer.step(rows.stop - rows.start)
    return param_arrays(net)


for case, kwargs in [("plain", {}), ("buckets", {"gradient_as_bucket_view": True})]:
    net = mlp("ps_%s_" % case)
    if pair.included():
        assert pair.rank() == r
        start = hvd.broadcast_object(param_arrays(net), root_rank=0, process_set=pair)
        for p, v in zip(net.collect_params().values(), start):
            p.set_data(mx.nd.array(v))
        ref = mlp("ref_%s_" % case)
        copy_params(net, ref)
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": LR},
                                         process_set=pair, **kwargs)
        got = train(net, trainer, slice(r * B, (r + 1) * B))
        # One process on the pair's concatenated batch.
        want = train(ref, gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": LR}),
                     slice(0, 2 * B))
        assert_close(got, want, LR, "trainer in a process set (%s)" % case)
        names = hvd.allgather_object("rank%d" % r, process_set=pair)
        assert names == ["rank0", "rank1"], names
    else:
        # Outside the set (as Horovod): the trainer and the optimizer wrapper reduce
        # nothing and train on this rank's own batch, like a plain Trainer.
        rows = slice(r * B, (r + 1) * B)
        ref, net2 = mlp("out_ref_%s_" % case), mlp("out_opt_%s_" % case)
        for other in (ref, net2):
            copy_params(net, other)
        got = train(net, hvd.DistributedTrainer(net.collect_params(), "sgd",
                                                {"learning_rate": LR}, process_set=pair,
                                                **kwargs), rows)
        opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=LR), process_set=pair)
        got2 = train(net2, gluon.Trainer(net2.collect_params(), opt, kvstore=None), rows)
        want = train(ref, gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": LR}), rows)
        assert_close(got, want, LR, "trainer outside its process set (%s)" % case)
        assert_close(got2, want, LR, "optimizer outside its process set (%s)" % case)
# shutdown() on one rank stops every rank: wait for all first (a global collective).
assert hvd.allreduce(mx.nd.ones((1,)), op=hvd.Sum, name="done").asscalar() == n
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
