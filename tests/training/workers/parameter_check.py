"""The periodic cross-rank check of the trainable parameters (issue 48 item 5; run by
tests/training/test_parameter_check.py on 3 ranks with MXHOROVOD_PARAMETER_CHECK_STEPS=2).

- Normal training of a net with BatchNorm (each rank sees other data, so the running
  statistics differ by rank, as they should): no warning, on DistributedTrainer and on
  gluon.Trainer over kvstore 'horovod'.
- One weight moved by one ulp in one element on rank 1 after the third update: every rank
  warns once, naming that parameter's number and name, and which ranks hold which value;
  on DistributedTrainer, on a gluon.Trainer with a DistributedOptimizer and over kvstore
  'horovod'.
- DistributedTrainer over the process set [0, 2], moved on rank 2: ranks 0 and 2 warn,
  naming ranks 0 and 2 only; rank 1, outside the set, trains alone and never warns.
Prints RANK <r> OK.
"""
import warnings

import mxnet as mx
import numpy as np
from mxnet import gluon

import mxhorovod as hvd

pair = hvd.ProcessSet([0, 2])  # ranks 0 and 2 train together, rank 1 alone
hvd.init(process_sets=[pair])
r, n = hvd.rank(), hvd.size()
assert n == 3
STEPS, B = 8, 4
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
rng = np.random.RandomState(5)
X = rng.randn(STEPS, n * B, 6).astype(np.float32)
Y = rng.randint(0, 3, size=(STEPS, n * B)).astype(np.float32)


def make_net(prefix):
    net = gluon.nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(gluon.nn.Dense(8, in_units=6), gluon.nn.BatchNorm(in_channels=8),
                gluon.nn.Activation("relu"), gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier())
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    return net


def train(net, trainer, batch, moved_on=None, moved=None):
    """STEPS updates on this rank's rows; after the third, rank ``moved_on`` moves one
    element of parameter ``moved`` by one ulp. Returns the messages of the warnings."""
    params = list(net.collect_params().values())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for s in range(STEPS):
            rows = slice(r * B, (r + 1) * B)
            with mx.autograd.record():
                loss = loss_fn(net(mx.nd.array(X[s, rows])), mx.nd.array(Y[s, rows]))
            loss.backward()
            trainer.step(batch)
            if s == 2 and r == moved_on:
                w = params[moved].data().asnumpy()
                w.flat[0] = np.nextafter(w.flat[0], np.float32(np.inf))
                params[moved].set_data(mx.nd.array(w))
        mx.nd.waitall()
    return [str(w.message) for w in caught if "no longer identical" in str(w.message)]


# Normal training: BatchNorm's running statistics differ by rank, and are not compared.
for path in ("trainer", "kvstore"):
    net = make_net("normal_%s_" % path)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                     {"learning_rate": 0.1, "momentum": 0.9}) \
        if path == "trainer" else gluon.Trainer(net.collect_params(), "sgd",
                                                {"learning_rate": 0.1}, kvstore="horovod")
    got = train(net, trainer, B if path == "trainer" else n * B)
    assert got == [], (path, got)
    stats = net[1].running_mean.data().asnumpy()
    every = hvd.allgather_object(stats, name="running_mean." + path)
    assert not np.array_equal(every[0], every[1]), "the ranks' running means should differ"

# One ulp on rank 1, in dense1's weight (collect_params() order: dense0 weight, bias,
# BatchNorm gamma, beta, running mean, running var (grad_req 'null': not compared), dense1
# weight, bias).
MOVED = 6
paths = {
    "DistributedTrainer": lambda p: (hvd.DistributedTrainer(p, "sgd", {"learning_rate": 0.1}), B),
    "DistributedOptimizer": lambda p: (gluon.Trainer(
        p, hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1)), kvstore=None), B),
    "kvstore": lambda p: (gluon.Trainer(p, "sgd", {"learning_rate": 0.1},
                                        kvstore="horovod"), n * B),
}
for path, make in paths.items():
    net = make_net("moved_%s_" % path)
    trainer, batch = make(net.collect_params())
    name = list(net.collect_params().keys())[MOVED]
    got = train(net, trainer, batch, moved_on=1, moved=MOVED)
    assert len(got) == 1, (path, got)
    # The trainer's own number of the parameter: its sorted order (gluon.Trainer sorts a
    # ParameterDict by name) among all its parameters.
    number = [p.name for p in trainer._params].index(name)
    expected = "parameter %d ('%s' on rank %d)" % (number, name, r)
    assert expected in got[0], (path, expected, got[0])
    assert "the ranks hold 2 different values (ranks 0, 2; rank 1)" in got[0], got[0]
    assert "at update 4 " in got[0] and "that differ: 1 of 6" in got[0], got[0]

# A Module with a DistributedOptimizer: fc1_weight moved on rank 1 after the third update.
data = mx.sym.Variable("data")
out = mx.sym.FullyConnected(mx.sym.Activation(mx.sym.FullyConnected(
    data, num_hidden=8, name="fc0"), act_type="relu"), num_hidden=3, name="fc1")
mod = mx.mod.Module(mx.sym.SoftmaxOutput(out, name="softmax"), context=mx.cpu())
mod.bind(data_shapes=[("data", (B, 6))], label_shapes=[("softmax_label", (B,))])
mod.init_params(mx.init.Xavier())
arg, aux = mod.get_params()
mod.set_params(hvd.broadcast_parameters(arg, root_rank=0) or arg, aux)
mod.init_optimizer(kvstore=None, optimizer=hvd.DistributedOptimizer(
    mx.optimizer.SGD(learning_rate=0.1, rescale_grad=1.0 / B)))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for s in range(STEPS):
        rows = slice(r * B, (r + 1) * B)
        mod.forward_backward(mx.io.DataBatch([mx.nd.array(X[s, rows])], [mx.nd.array(Y[s, rows])]))
        mod.update()
        if s == 2 and r == 1:
            w = mod._exec_group.param_arrays[mod._exec_group.param_names.index("fc1_weight")][0]
            v = w.asnumpy()
            v.flat[0] = np.nextafter(v.flat[0], np.float32(np.inf))
            w[:] = v
    mx.nd.waitall()
got = [str(w.message) for w in caught if "no longer identical" in str(w.message)]
assert len(got) == 1 and "('fc1_weight' on rank %d)" % r in got[0] and \
    "Module with a DistributedOptimizer" in got[0] and \
    "(ranks 0, 2; rank 1)" in got[0], got

# A process set: ranks 0 and 2 train together, rank 1 alone.
net = make_net("set_")
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                 process_set=pair)
got = train(net, trainer, B, moved_on=2, moved=0)
if r == 1:
    assert got == [], got
else:
    assert len(got) == 1, got
    assert "the ranks hold 2 different values (rank 0; rank 2)" in got[0], got[0]
# Rank 1 stays until the set's collectives are done (shutdown stops every rank).
hvd.allreduce(mx.nd.ones((1,)), name="parameter_check.end").wait_to_read()
print("RANK %d OK" % r)
