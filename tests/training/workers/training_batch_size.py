"""Ranks passing different batch sizes to DistributedTrainer.update (after
allreduce_grads()) or to a gluon.Trainer over kvstore 'horovod' are warned once, two
steps later (a step's check is read at the step after next), on every rank
(mxhorovod.checks.batch_check); equal sizes never warn. DistributedTrainer.step and a
DistributedOptimizer weight each rank by its batch size: different sizes there are right,
and not warned.
Also: a trainer in a process set that leaves out the last rank, with bucket views, and
the allreduce_grads() + update() path; NaN sizes (on one rank: warned; on every rank: not);
a mismatch in the last step, warned at hvd.shutdown(), also when that trainer was freed
before; a trainer freed after a mismatch in its last step (a second phase of training with a
new trainer) is warned two steps of the next trainer later. Learning rates or weight decays that
differ between the ranks (set_learning_rate on one rank, an optimizer made differently,
also wrapped in a DistributedOptimizer) are warned the same way; a scheduler that changes
the rate alike on every rank is not. Prints RANK <r> OK."""
import gc
import time
import warnings

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxhorovod as hvd
from training_common import global_data, mlp

pair = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[pair])
r, n = hvd.rank(), hvd.size()
x, y = global_data(8, 4)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()


def run(trainer, net, sizes, split=False):
    """One step per entry of ``sizes`` (this rank's batch size per step); returns the
    warnings raised in each step."""
    got = []
    for s, b in enumerate(sizes):
        rows = 4 if b != b else b  # a NaN size: 4 samples, NaN passed to step()
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x[s, :rows])), mx.nd.array(y[s, :rows]))
        loss.backward()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if split:
                trainer.allreduce_grads()
                trainer.update(b)
            else:
                trainer.step(b)
        mine = [w for w in caught if "weights now differ" in str(w.message)]
        for w in mine:
            assert w.filename == __file__, (w.filename, str(w.message))  # the script's line
        got.append([str(w.message) for w in mine])
    return got


def trainer_for(prefix, optimizer_params=None, **kw):
    net = mlp(prefix)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                     optimizer_params or {"learning_rate": 0.1}, **kw)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    return trainer, net


# Equal sizes: no warning at any step.
trainer, net = trainer_for("same_")
assert run(trainer, net, [4, 4, 3, 3, 4]) == [[]] * 5

# Step 2 (1-based) differs on rank 1 and later: warned at step 4 only, naming both sizes.
for split in (False, True):
    trainer, net = trainer_for("split_" if split else "step_", gradient_as_bucket_view=split)
    sizes = [4, 4 - (r == 1), 4, 4 - (r == 1), 4]
    got = run(trainer, net, sizes, split)
    if not split:
        assert got == [[]] * 5, (r, got)  # step(): weighted by the sizes, not a mismatch
        continue
    assert [len(g) for g in got] == [0, 0, 0, 1, 0], (r, got)
    text = got[3][0]
    assert "at step 2" in text and "this rank, %d, %d;" % (r, sizes[1]) in text and "from 3 to 4" in text, text
    assert ("DistributedTrainer.update(batch_size)" if split else "DistributedTrainer.step(") in text, text

# A plain gluon.Trainer with a DistributedOptimizer, and one over kvstore 'horovod'.
for kind in ("optimizer", "kvstore"):
    net = mlp(kind + "_")
    if kind == "optimizer":
        trainer = gluon.Trainer(net.collect_params(),
                                hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1)))
    else:
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                kvstore="horovod")
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    got = run(trainer, net, [4, 4, 3 + (r == 0), 4, 4])
    if kind == "optimizer":  # weighted by each rank's batch size: not a mismatch
        assert got == [[]] * 5, (kind, r, got)
        continue
    assert [len(g) for g in got] == [0, 0, 0, 0, 1], (kind, r, got)
    assert "Trainer.step(batch_size): at step 3" in got[4][0], got[4][0]

# A set of ranks 0 and 1: its members are warned; a rank outside it trains alone, unasked.
trainer, net = trainer_for("set_", process_set=pair)
got = run(trainer, net, [4, 4 - (r == 1), 4, 4], split=True)
assert [len(g) for g in got] == ([0, 0, 0, 1] if r in (0, 1) else [0, 0, 0, 0]), (r, got)

# NaN on rank 0 only: a mismatch, warned naming nan; NaN on every rank: none.
trainer, net = trainer_for("nan1_")
got = run(trainer, net, [4, float("nan") if r == 0 else 4, 4, 4], split=True)
assert [len(g) for g in got] == [0, 0, 0, 1], (r, got)
assert "at step 2" in got[3][0] and "from 4 to 4, and nan," in got[3][0], got[3][0]
trainer, net = trainer_for("nanall_")
assert run(trainer, net, [float("nan"), float("nan"), 4, 4], split=True) == [[]] * 4, r

# The size changes and back on every rank (the check of a repeated size reuses its array).
trainer, net = trainer_for("change_")
assert run(trainer, net, [4, 3, 3, 4, 4, 3, 4]) == [[]] * 7, r

# set_learning_rate on rank 0 only before step 2: warned at step 4, naming both rates.
trainer, net = trainer_for("lr_")
got = []
for s, lr in enumerate([0.1, 0.05 if r == 0 else 0.1, None, None, None]):
    if lr is not None:
        trainer.set_learning_rate(lr)
    got += run(trainer, net, [4])
assert [len(g) for g in got] == [0, 0, 0, 1, 0], (r, got)
assert "at step 2" in got[3][0] and "different learning rates" in got[3][0] and \
    "from 0.05 to 0.1" in got[3][0] and "batch sizes" not in got[3][0], got[3][0]

# A weight decay made differently on the last rank, in a DistributedOptimizer: step 1's
# check, read at step 3; its batch size also differs, which the DistributedOptimizer
# weights (not a mismatch).
net = mlp("wd_")
opt = mx.optimizer.SGD(learning_rate=0.1, wd=1e-4 * (2 if r == n - 1 else 1))
trainer = gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(opt))
hvd.broadcast_parameters(net.collect_params(), root_rank=0)
got = run(trainer, net, [4 - (r == n - 1), 4, 4])
assert [len(g) for g in got] == [0, 0, 1], (r, got)
assert "at step 1" in got[2][0] and "different weight decays" in got[2][0] and \
    "from 0.0001 to 0.0002" in got[2][0] and "batch sizes" not in got[2][0], got[2][0]

# A scheduler that lowers the rate alike on every rank (every 2 updates): no warning.
sched = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)
trainer, net = trainer_for("sched_", {"learning_rate": 0.1, "lr_scheduler": sched})
assert run(trainer, net, [4] * 7) == [[]] * 7, r
assert trainer.learning_rate < 0.1  # the schedule ran

# Two phases of training, each with its own trainer bound to one variable: the first
# phase's last step differs. Its check outlives the freed trainer and is read two steps of
# the next one later (it was dropped with the trainer: no warning, the weights differed).
trainer, net = trainer_for("phase1_")
assert run(trainer, net, [4, 4, 4 - (r == 1)], split=True) == [[], [], []], r
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.01})
gc.collect()  # the first trainer is gone (with or without a reference cycle)
got = run(trainer, net, [4, 4, 4], split=True)
assert [len(g) for g in got] == [0, 1, 0], (r, got)
assert "DistributedTrainer.update(batch_size): at step 3" in got[1][0] and "from 3 to 4" in \
    got[1][0], got[1][0]

# The last step differs: read and warned at shutdown(), once this rank's collectives ran
# (with the step before it still unread too); also for a trainer freed before shutdown.
trainer, net = trainer_for("last_")
assert run(trainer, net, [4, 4, 4 - (r == 1)], split=True) == [[], [], []], r
freed, freed_net = trainer_for("freed_")
assert run(freed, freed_net, [4, 4, 4 - (r == 0)], split=True) == [[], [], []], r
del freed, freed_net
gc.collect()
hvd.allreduce(mx.nd.ones((1,)), name="done").wait_to_read()
if r == n - 1:  # the others' shutdown stops mxhorovod here first: still read and warned
    time.sleep(1.0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    hvd.shutdown()
last = [str(w.message) for w in caught if "weights now differ" in str(w.message)]
assert len(last) == 2 and all("at step 3" in w and "from 3 to 4" in w for w in last), (r, last)
print("RANK %d OK" % r, flush=True)
