"""Durable commits (mxhorovod/elastic/durable.py) under plain mpirun, as after a whole-job
preemption: ``durable_resume.py MODE STEPS [DIE_AFTER]``.

- ``reference``: trains STEPS steps, commits after each, writes rank 0's parameters to
  $RESULT.
- ``die``: the same, but every rank exits (code 9, no shutdown) right after commit
  DIE_AFTER, as a job killed as a whole.
- ``resume``: starts from the durable commit: the first step is DIE_AFTER on every rank,
  the reset callbacks ran once, the parameters end as the reference's, and the folder
  holds no commit afterwards.
- ``badfolder``: the durable folder is open to other users' writes: the first commit
  raises OSError naming the variable.
"""
import os
import sys

import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
mode, steps = sys.argv[1], int(sys.argv[2])
die_after = int(sys.argv[3]) if len(sys.argv) > 3 else None

mx.random.seed(7)
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(8, in_units=5, activation="relu"), mx.gluon.nn.Dense(3, in_units=8))
net.initialize(mx.init.Xavier())
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                 {"learning_rate": 0.1, "momentum": 0.9})
state = hvd.elastic.GluonState(net, trainer, step=0)
resets = []
state.register_reset_callbacks([lambda: resets.append(state.step)])
first = []


@hvd.elastic.run
def train(state):
    first.append(state.step)
    while state.step < steps:
        rng = np.random.RandomState(100 * state.step + r)
        x = mx.nd.array(rng.rand(4, 5))
        y = mx.nd.array(rng.randint(0, 3, size=4))
        with mx.autograd.record():
            loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
        loss.backward()
        trainer.step(4)
        state.step += 1
        state.commit()
        if mode == "die" and state.step == die_after:
            sys.stdout.flush()
            os._exit(9)


folder = os.environ["MXHOROVOD_ELASTIC_DURABLE_DIR"]
if mode == "badfolder":
    try:
        train(state)
        raise AssertionError("rank %d: no error" % r)
    except OSError as e:
        assert "MXHOROVOD_ELASTIC_DURABLE_DIR" in str(e) and "other users can write" in str(e), e
    print("RANK %d OK" % r, flush=True)
    sys.exit(0)

train(state)
params = np.concatenate([p.data().asnumpy().ravel()
                         for _, p in sorted(net.collect_params().items())])
if mode == "reference":
    if r == 0:
        np.save(os.environ["RESULT"], params)
    assert first == [0] and not resets, (r, first, resets)
elif mode == "resume":
    assert first == [die_after] and resets == [die_after], (r, first, resets)
    ref = np.load(os.environ["RESULT"])
    assert np.allclose(params, ref, rtol=1e-6, atol=1e-7), (r, np.abs(params - ref).max())
    every = hvd.allgather_object(params, name="final")
    assert all(np.array_equal(p, params) for p in every), r
hvd.allreduce(mx.nd.zeros(1), name="done").wait_to_read()  # rank 0 has removed them
left = [f for _, _, files in os.walk(folder) for f in files]
assert not left, (r, left)
print("RANK %d OK" % r, flush=True)
