"""hvd.broadcast_optimizer_state and resuming from one shared states file (issue 48 item 4;
tests/training/test_optimizer_state.py runs it on 2 and 3 ranks).

The ranks train with parameters on mx.cpu(rank) (as scripts on mx.cpu(hvd.local_rank())
do: MXNet counts updates per device id), Adam (its bias correction reads the counts) and a
FactorScheduler (its position follows num_update). After 3 steps rank 0 saves the states;
then fresh networks and DistributedTrainers resume, either with rank 0 alone loading the
file and broadcast_optimizer_state, or with every rank loading it. The 3 more steps must
equal one process trained 6 steps on the concatenated batch, and every rank must hold the
root's counts, num_update and learning rate before stepping. Then a Module, and the errors:
a parameter not yet initialized on one rank, a wrong argument on one rank (an error on
every rank, never a hang). Prints RANK <r> OK."""
import os
import tempfile

import mxnet as mx
import numpy as np
from mxnet import gluon

import mxhorovod as hvd
from training_common import assert_close, global_data, mlp, param_arrays, train_rows

hvd.init()
r, n = hvd.rank(), hvd.size()
B, STEPS, LR = 4, 6, 0.01
x, y = global_data(STEPS, B, seed=3)
every, mine = slice(0, n * B), slice(r * B, (r + 1) * B)
ctx = mx.cpu(r)
folder = hvd.broadcast_object(tempfile.mkdtemp() if r == 0 else None, root_rank=0)


def opt():
    return mx.optimizer.Adam(learning_rate=LR, wd=1e-3, lr_scheduler=mx.lr_scheduler.FactorScheduler(
        step=2, factor=0.5, base_lr=LR))


def net_on(prefix, weights, where):
    net = mlp(prefix)
    net.collect_params().reset_ctx(where)
    for p, v in zip(net.collect_params().values(), weights):
        p.set_data(mx.nd.array(v, ctx=where))
    return net


def train(net, trainer, steps, rows):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    where = list(net.collect_params().values())[0].list_ctx()[0]
    for s in steps:
        with mx.autograd.record():
            loss = loss_fn(net(mx.nd.array(x[s, rows], ctx=where)),
                           mx.nd.array(y[s, rows], ctx=where))
        loss.backward()
        trainer.step(rows.stop - rows.start)


weights0 = hvd.broadcast_object(param_arrays(mlp("os_start_")), root_rank=0)

# One process, 6 steps on the concatenated batch.
ref = net_on("os_ref_", weights0, mx.cpu(0))
ref_trainer = gluon.Trainer(ref.collect_params(), opt(), kvstore=None)
train(ref, ref_trainer, range(STEPS), every)
want = param_arrays(ref)

# 3 distributed steps; rank 0 saves.
net = net_on("os_a_", weights0, ctx)
trainer = hvd.DistributedTrainer(net.collect_params(), opt())
train(net, trainer, range(3), mine)
half = hvd.broadcast_object(param_arrays(net), root_rank=0)
states = os.path.join(folder, "trainer.states")
if r == 0:
    trainer.save_states(states)
hvd.allreduce(mx.nd.ones((1,)), name="saved").wait_to_read()


def optimizer_view(trainer):
    inner = trainer._optimizer
    inner = getattr(inner, "_optimizer", inner)
    counts = inner._all_index_update_counts.get(ctx.device_id, {})
    return {"counts": sorted(counts.items()), "num_update": inner.num_update,
            "lr": inner.learning_rate}


def resume(how):
    net = net_on("os_%s_" % how, half if (how == "shared" or r == 0) else weights0, ctx)
    trainer = hvd.DistributedTrainer(net.collect_params(), opt())
    if how == "shared":
        trainer.load_states(states)
    else:
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
        if r == 0:
            trainer.load_states(states)
        hvd.broadcast_optimizer_state(trainer, root_rank=0)
    view = optimizer_view(trainer)
    assert view["counts"] and all(c == 3 for _, c in view["counts"]), (r, how, view)
    views = hvd.allgather_object(view, name="views.%s" % how)
    assert all(v == views[0] for v in views), (r, how, views)
    train(net, trainer, range(3, STEPS), mine)
    assert_close(param_arrays(net), want, LR, "resume %s" % how)


resume("root")  # rank 0 loads, then broadcast_optimizer_state
resume("shared")  # every rank loads rank 0's file

# Before any rank stepped: SGD momentum states are made and broadcast (the root's are
# nonzero after a step of its own outside the job).
net = net_on("os_fresh_", weights0, ctx)
sgd = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
if r == 0:
    for i, p in enumerate(sgd._params):
        sgd._updaters[0].states[i] = mx.nd.full(p.shape, 7.0 + i, ctx=ctx)
        sgd._updaters[0].states_synced[i] = True
hvd.broadcast_optimizer_state(sgd)
for i, p in enumerate(sgd._params):
    got = sgd._updaters[0].states[i].asnumpy()
    assert np.all(got == 7.0 + i), (r, i, got.ravel()[:3])

# A Module with a DistributedOptimizer.
data = mx.sym.Variable("data")
sym = mx.sym.FullyConnected(data, num_hidden=3, name="fc")
mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=ctx)
mod.bind(data_shapes=[("data", (2, 4))], for_training=True)
mod.init_params(mx.init.Constant(0.1))
mod.init_optimizer(kvstore=None, optimizer=hvd.DistributedOptimizer(
    mx.optimizer.SGD(learning_rate=0.1 * (r + 1), momentum=0.9)))
if r == 0:
    for i in range(2):
        w = mod._exec_group.param_arrays[i][0]
        mod._updater.states[i] = mx.nd.full(w.shape, 3.0, ctx=ctx)
        mod._updater.states_synced[i] = True
hvd.broadcast_optimizer_state(mod)
inner = mod._optimizer._optimizer
assert abs(inner.lr - 0.1) < 1e-12, (r, inner.lr)
for i in range(2):
    assert np.all(mod._updater.states[i].asnumpy() == 3.0), (r, i)

# The root loads states of another optimizer (Adam over SGD's momentum): every rank takes
# Adam and Adam-shaped states, and steps alike.
pnet = net_on("os_other_", weights0, ctx)
ptrainer = hvd.DistributedTrainer(pnet.collect_params(), "sgd",
                                  {"learning_rate": 0.1, "momentum": 0.9})
train(pnet, ptrainer, range(1), mine)
if r == 0:
    ptrainer.load_states(states)  # the Adam trainer's file
hvd.broadcast_optimizer_state(ptrainer)
assert type(ptrainer._optimizer).__name__ == "Adam", (r, type(ptrainer._optimizer))
train(pnet, ptrainer, range(1, 2), mine)
views = hvd.allgather_object(param_arrays(pnet), name="views.other")
for v in views:
    assert_close(v, views[0], LR, "after another optimizer's states")

# A Module on two contexts, updating itself: every device's states and counts.
os.environ["MXNET_UPDATE_ON_KVSTORE"] = "0"
two = mx.mod.Module(mx.sym.SoftmaxOutput(mx.sym.FullyConnected(
    mx.sym.Variable("data"), num_hidden=3, name="fc2"), name="softmax"),
    context=[mx.cpu(0), mx.cpu(1)])
two.bind(data_shapes=[("data", (4, 5))], label_shapes=[("softmax_label", (4,))])
two.init_params(mx.init.Constant(0.1))
two.init_optimizer(kvstore="local", optimizer="adam", optimizer_params={"learning_rate": 0.01})
del os.environ["MXNET_UPDATE_ON_KVSTORE"]
assert two._updater is not None
batch = mx.io.DataBatch([mx.nd.array(np.full((4, 5), r + 1.0))], [mx.nd.array([0, 1, 2, 0])])
two.forward_backward(batch)
two.update()
if r == 0:
    for idx, st in two._updater.states.items():
        for a in st:
            a[:] = 7.0 + idx
    for counts in two._optimizer._all_index_update_counts.values():
        for i in counts:
            counts[i] = 50
hvd.broadcast_optimizer_state(two)
assert {d: dict(c) for d, c in two._optimizer._all_index_update_counts.items() if c} == \
    {0: {0: 50, 2: 50}, 1: {1: 50, 3: 50}}, (r, two._optimizer._all_index_update_counts)
for idx, st in two._updater.states.items():
    assert all(np.all(a.asnumpy() == 7.0 + idx) for a in st), (r, idx)

# Errors, on every rank, before anything is sent.
late = mlp("os_late_") if r != 1 else None
if r == 1:
    late = gluon.nn.Dense(3, prefix="os_late_dense0_")
    late.initialize()  # deferred: no in_units, no forward yet
bad = hvd.DistributedTrainer(late.collect_params(), "sgd")
try:
    hvd.broadcast_optimizer_state(bad)
except ValueError as e:
    text = str(e)
    assert ("not initialized yet" in text) if r == 1 else ("rank 1:" in text), (r, text)
else:
    raise AssertionError("rank %d: no error for a deferred parameter on rank 1" % r)

try:
    hvd.broadcast_optimizer_state(trainer if r != 0 else "trainer")
except TypeError as e:
    assert r == 0 and "not str" in str(e), (r, str(e))
except ValueError as e:
    assert r != 0 and "rank 0:" in str(e), (r, str(e))
else:
    raise AssertionError("rank %d: no error for a wrong argument on rank 0" % r)
print("RANK %d OK" % r, flush=True)
