"""hvd.elastic states on N ranks (also 1): commit / restore / sync bit-identical on every
rank, the commit store's round trip (a fresh model and trainer get exactly the committed
parameters, optimizer states and scalars), and ElasticSampler's resumption."""
import os
import sys
import tempfile

import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()


def make(seed):
    mx.random.seed(seed)
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, in_units=5, activation="relu"), mx.gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier())
    trainer = hvd.DistributedTrainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    return net, trainer


def step(net, trainer, k):
    rng = np.random.RandomState(100 * k + r)
    x = mx.nd.array(rng.rand(4, 5))
    y = mx.nd.array(rng.randint(0, 3, size=4))
    with mx.autograd.record():
        loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    trainer.step(4)


def params(net):
    return {k: v.data().asnumpy().copy() for k, v in sorted(net.collect_params().items())}


def trainer_states(trainer):
    states = trainer._updaters[0].states
    out = {}
    for i, s in sorted(states.items()):
        out[i] = [a.asnumpy().copy() for a in (s if isinstance(s, (tuple, list)) else [s])]
    return out, trainer._optimizer.num_update


def same_on_every_rank(tag, arrays):
    """Every rank holds bit-identical arrays (allgather of the raw bytes)."""
    flat = np.concatenate([a.ravel().view(np.uint8) for a in arrays])
    gathered = hvd.allgather_object(flat.tobytes(), name="check." + tag)
    for q, data in enumerate(gathered):
        assert data == gathered[0], "%s: rank %d differs from rank 0" % (tag, q)


def all_arrays(net, trainer):
    st, _ = trainer_states(trainer)
    return list(params(net).values()) + [a for i in sorted(st) for a in st[i]]


# --- commit, restore, sync in one job ---
net, trainer = make(seed=1 + r)  # different starting weights on every rank
state = hvd.elastic.GluonState(net, trainer, epoch=0, batch=0)
state.sync(0)
same_on_every_rank("after-sync", all_arrays(net, trainer))
for k in range(3):
    step(net, trainer, k)
state.epoch, state.batch = 1, 7
state.commit()
committed_p, (committed_s, committed_nu) = params(net), trainer_states(trainer)
for k in range(3, 5):
    step(net, trainer, k)
state.epoch, state.batch = 2, 9
assert trainer._optimizer.num_update != committed_nu
state.restore()
assert (state.epoch, state.batch) == (1, 7)
for key, value in params(net).items():
    assert np.array_equal(value.view(np.uint8), committed_p[key].view(np.uint8)), key
st, nu = trainer_states(trainer)
assert nu == committed_nu, (nu, committed_nu)
for i in committed_s:
    for a, b in zip(st[i], committed_s[i]):
        assert np.array_equal(a, b), i
same_on_every_rank("after-restore", all_arrays(net, trainer))
# training after a restore goes exactly as after the commit
for k in range(3, 5):
    step(net, trainer, k)
again = params(net)

# sync from the last rank: every rank gets its parameters, states and scalars
root = n - 1
if r != root:
    for p in net.collect_params().values():
        p.set_data(p.data() * 0 + r)
    state.epoch = 100 + r
state.save()
expect = hvd.broadcast_object((params(net), trainer_states(trainer)[0], state.epoch), root_rank=root)
state.sync(root)
got = params(net)
for key in got:
    assert np.array_equal(got[key], expect[0][key]), key
st, _ = trainer_states(trainer)
for i in expect[1]:
    for a, b in zip(st[i], expect[1][i]):
        assert np.array_equal(a, b)
assert state.epoch == expect[2], (state.epoch, expect[2])
same_on_every_rank("after-sync-root", all_arrays(net, trainer))

# --- the commit store: a fresh model and trainer load exactly the last commit ---
base = hvd.broadcast_object(tempfile.mkdtemp(prefix="mxh-elastic-test-") if r == 0 else None,
                           root_rank=0)
os.environ.update(MXHOROVOD_ELASTIC="1", MXHOROVOD_ELASTIC_COMMIT_DIR=base,
                  MXHOROVOD_ELASTIC_JOB_ID="t1", MXHOROVOD_ELASTIC_GENERATION="3")
from mxhorovod.elastic import runtime  # noqa: E402
state.epoch, state.batch = 4, 2
state.commit()  # writes commit-3-<counter> (local rank 0)
counter = state._commit_counter
final_p, (final_s, final_nu) = params(net), trainer_states(trainer)
hvd.allreduce(mx.nd.zeros(1), name="barrier.written").wait_to_read()
if hvd.local_rank() == 0:
    g, c, path = runtime.store().latest()
    assert (g, c) == (3, counter), (g, c, counter)
net2, trainer2 = make(seed=50 + r)
state2 = hvd.elastic.GluonState(net2, trainer2, epoch=0, batch=0)
root, best, _ = runtime.load_best(state2)
assert best == (3, counter) and root == 0, (root, best)
state2.sync(root)
for key, value in params(net2).items():
    # names differ (a second net): compare in order
    pass
for a, b in zip(params(net2).values(), final_p.values()):
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
st2, nu2 = trainer_states(trainer2)
assert nu2 == final_nu, (nu2, final_nu)
for i in final_s:
    for a, b in zip(st2[i], final_s[i]):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
assert (state2.epoch, state2.batch, state2._commit_counter) == (4, 2, counter)
same_on_every_rank("after-load", all_arrays(net2, trainer2))
# both trainers go on identically
step(net, trainer, 9)
step(net2, trainer2, 9)
for a, b in zip(params(net2).values(), params(net).values()):
    assert np.array_equal(a, b)

# --- ElasticSampler: resuming mid-epoch on another number of ranks ---
data = list(range(103))
s = hvd.elastic.ElasticSampler(data, shuffle=True, seed=5)
s.set_epoch(2)
mine = list(iter(s))
assert len(mine) == -(-103 // n)
seen = hvd.allgather_object(mine)
order = list(range(103))
import random  # noqa: E402
random.Random(7).shuffle(order)
flat = [i for q in range(len(mine)) for i in (x[q] for x in seen)]
assert flat[:103] == order, "rank r takes every size-th index of the shuffled epoch"
s.record_batch(0, 4)
s.record_batch(1, 4)  # 8 * n samples done
state3 = hvd.elastic.ObjectState(sampler=s, note="x")
state3.commit()
s2 = hvd.elastic.ElasticSampler(data, shuffle=True, seed=5)
s2.load_state_dict(state3._saved_handled["sampler"])
rest = list(iter(s2))
left = order[8 * n:]
assert rest == (left + left[:len(rest) * n - len(left)])[r::n], "the rest of the epoch"
# --- bad input: clear errors ---
def raises(kind, text, fn):
    try:
        fn()
    except kind as e:
        assert text in str(e), str(e)
    else:
        raise AssertionError("no %s (%s)" % (kind.__name__, text))


raises(RuntimeError, "is not initialized: call net.initialize() before making the state",
       lambda: hvd.elastic.GluonState(mx.gluon.nn.Dense(3), None))
deferred = mx.gluon.nn.Dense(3)
deferred.initialize()
raises(RuntimeError, "is not initialized yet (deferred): run one forward pass",
       lambda: hvd.elastic.GluonState(deferred, None))
raises(ValueError, "GluonState takes a gluon Block, a ParameterDict",
       lambda: hvd.elastic.GluonState("net", None))
snap = state._snapshot()
fewer = mx.gluon.nn.Dense(3, in_units=5)
fewer.initialize()
raises(ValueError, "the commit holds 4 parameters, this model 2",
       lambda: hvd.elastic.GluonState(fewer, None)._load_snapshot(snap))
wider = mx.gluon.nn.HybridSequential()
wider.add(mx.gluon.nn.Dense(7, in_units=5), mx.gluon.nn.Dense(3, in_units=7))
wider.initialize()
raises(ValueError, "has shape (7,); the commit's",
       lambda: hvd.elastic.GluonState(wider, None)._load_snapshot(snap))
hvd.allreduce(mx.nd.zeros(1), name="barrier.done").wait_to_read()
if hvd.local_rank() == 0:  # the commits made above (one host: one directory)
    import shutil
    shutil.rmtree(base)
print("RANK %d OK" % r, flush=True)
