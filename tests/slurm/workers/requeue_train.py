"""Training under hvd.elastic.run with a commit every step, for tests/slurm: rank 0 appends
``<unix time> START <SLURM_RESTART_COUNT> <size> <step loaded>``, ``<time> COMMIT <step>``
and ``<time> END`` to $REQUEUE_LOG, and writes its final parameters to $REQUEUE_LOG.npy.
STEPS steps (default 12), STEP_SLEEP seconds after each (default 0.5). Identical data on
every rank and step (seeded by the step), so the result does not depend on the ranks."""
import os
import time

import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r = hvd.rank()
LOG = os.environ["REQUEUE_LOG"]
STEPS = int(os.environ.get("STEPS", "12"))
mx.random.seed(7)
net = mx.gluon.nn.Dense(3, in_units=5)
net.initialize(mx.init.Xavier())
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                 {"learning_rate": 0.1, "momentum": 0.9})
state = hvd.elastic.GluonState(net, trainer, step=0)


def note(text):
    if r == 0:
        with open(LOG, "a") as f:
            f.write("%.3f %s\n" % (time.time(), text))


@hvd.elastic.run
def train(state):
    note("START %s %d %d" % (os.environ.get("SLURM_RESTART_COUNT", "0"), hvd.size(), state.step))
    while state.step < STEPS:
        rng = np.random.RandomState(state.step)
        x = mx.nd.array(rng.rand(4, 5))
        y = mx.nd.array(rng.randint(0, 3, size=4))
        with mx.autograd.record():
            loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
        loss.backward()
        trainer.step(4)
        state.step += 1
        state.commit()
        note("COMMIT %d" % state.step)
        time.sleep(float(os.environ.get("STEP_SLEEP", "0.5")))


train(state)
if r == 0:
    np.save(LOG + ".npy", net.weight.data().asnumpy())
note("END")
print("RANK %d OK" % r, flush=True)
