"""A training script written for Horovod, run unchanged through mxhorovod's alias
(tests/parity/test_horovod_alias.py): ``import horovod.mxnet as hvd`` and Horovod's module
paths, as GluonCV's train_horovod.py and Horovod's examples write them.

    python horovod_style.py DIR      (on N ranks; DIR: where rank 0 saves and all resume)

It broadcasts rank-dependent initial weights, trains one step with a DistributedTrainer
(momentum), saves the parameters and the trainer states on rank 0, resumes from them in a
new net and trainer on every rank, trains one more step, validates, and trains a step with
gluon.Trainer over DistributedOptimizer. Each value is checked on every rank against the
mean of the ranks' gradients, and the ranks against each other. Only the last check names
mxhorovod. Prints ``RANK <r> OK``.
"""
import os
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import horovod
import horovod.mxnet as hvd
from horovod.mxnet.compression import Compression
from horovod.mxnet.functions import broadcast_object
from horovod.mxnet.mpi_ops import allreduce, rank, size

LR, MOMENTUM = 0.1, 0.9

save_dir = sys.argv[1]
hvd.init()
r, n = hvd.rank(), hvd.size()
assert (rank(), size()) == (r, n) and n > 1
ctx = mx.cpu(hvd.local_rank())


def agree(value, what):
    """Every rank holds the same ``value``."""
    value = mx.nd.array(value)
    high = allreduce(value, op=hvd.Max, name=what + ".max").asnumpy()
    low = allreduce(value, op=hvd.Min, name=what + ".min").asnumpy()
    assert np.array_equal(high, low), (what, high, low)


def one_step(net, trainer):
    """loss = sum(net(x)), x = (rank + 1) * ones: d loss / d weight = x on each output row,
    d loss / d bias = 1. Averaged over the ranks: (n + 1) / 2 and 1."""
    x = mx.nd.ones((1, 4), ctx=ctx) * (r + 1)
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    trainer.step(1)


GRAD_W, GRAD_B = (n + 1) / 2.0, 1.0

# Different weights on every rank until rank 0's are broadcast.
mx.random.seed(100 + r)
net = gluon.nn.Dense(3, in_units=4)
net.initialize(mx.init.Uniform(), ctx=ctx)
params = net.collect_params()
hvd.broadcast_parameters(params, root_rank=0)
w0, b0 = net.weight.data().asnumpy(), net.bias.data().asnumpy()
agree(w0, "w0")

trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": LR, "momentum": MOMENTUM},
                                 compression=Compression.none)
one_step(net, trainer)
w1, b1 = w0 - LR * GRAD_W, b0 - LR * GRAD_B
np.testing.assert_allclose(net.weight.data().asnumpy(), w1, rtol=1e-5)
np.testing.assert_allclose(net.bias.data().asnumpy(), b1, rtol=1e-5)

# Save on rank 0, as GluonCV does; the broadcast tells the others the files are there.
params_file = os.path.join(save_dir, "net.params")
states_file = os.path.join(save_dir, "trainer.states")
if r == 0:
    net.save_parameters(params_file)
    trainer.save_states(states_file)
assert broadcast_object("saved" if r == 0 else None, root_rank=0) == "saved"

# Resume: a new net and trainer from the files. The momentum comes back from the states:
# the second step moves 1.9 times as far as the first (without the states, 1 time).
resumed = gluon.nn.Dense(3, in_units=4)
resumed.load_parameters(params_file, ctx=ctx)
trainer2 = hvd.DistributedTrainer(resumed.collect_params(), "sgd",
                                  {"learning_rate": LR, "momentum": MOMENTUM})
trainer2.load_states(states_file)
one_step(resumed, trainer2)
w2, b2 = w1 - (1 + MOMENTUM) * LR * GRAD_W, b1 - (1 + MOMENTUM) * LR * GRAD_B
np.testing.assert_allclose(resumed.weight.data().asnumpy(), w2, rtol=1e-5)
np.testing.assert_allclose(resumed.bias.data().asnumpy(), b2, rtol=1e-5)
agree(resumed.weight.data().asnumpy(), "w2")

# Validate: each rank scores its own shard; the mean over ranks.
x_val = np.full((2, 4), r + 1.0, dtype=np.float32)
score = resumed(mx.nd.array(x_val, ctx=ctx)).mean().asscalar()
mean = allreduce(mx.nd.array([score]), op=hvd.Average, name="val").asscalar()
want = np.mean([(np.full((2, 4), k + 1.0) @ w2.T + b2).mean() for k in range(n)])
np.testing.assert_allclose(mean, want, rtol=1e-5)

# gluon.Trainer over DistributedOptimizer (Horovod's other way), without a kvstore.
opt = mx.optimizer.create("sgd", learning_rate=LR)
trainer3 = gluon.Trainer(resumed.collect_params(), hvd.DistributedOptimizer(opt), kvstore=None)
one_step(resumed, trainer3)
np.testing.assert_allclose(resumed.weight.data().asnumpy(), w2 - LR * GRAD_W, rtol=1e-5)
agree(resumed.weight.data().asnumpy(), "w3")

total = allreduce(mx.nd.ones((2,)) * (r + 1), op=hvd.Sum, name="total").asnumpy()
assert np.array_equal(total, [n * (n + 1) / 2] * 2), total

# The one line that knows: horovod.mxnet was mxhorovod's API under Horovod's name.
import mxhorovod  # noqa: E402

assert horovod.mxhorovod_alias is True and hvd.DistributedTrainer is mxhorovod.DistributedTrainer
print("RANK %d OK" % r, flush=True)
