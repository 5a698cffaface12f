"""hvd.join() (issue 48): a rank out of data joins; the others' Sum and Average allreduces
go on with it adding zeros (single, grouped, in place; Average divides by the full size);
collectives that cannot take zeros fail naming the joined ranks; join returns the rank that
joined last, on every rank; the same names work again in the next epoch (response cache);
a second join() while one waits is refused. DistributedTrainer steps over uneven shards
(and short last batches) equal one process on the active ranks' concatenated batch.
Prints RANK <r> OK."""
import os
import threading
import time
import warnings

# The parameter check every 2 updates: ranks with uneven data must still compare alike.
os.environ["MXHOROVOD_PARAMETER_CHECK_STEPS"] = "2"

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxhorovod as hvd
from mxhorovod.collectives.join import identity_when_joined
from training_common import IN, copy_params, mlp

hvd.init()
r, n = hvd.rank(), hvd.size()


def expect_error(fn, *words):
    try:
        fn()
    except Exception as e:  # MXNetError from the engine, or ValueError at the call
        text = str(e)
        assert all(w in text for w in words), (r, text, words)
        return text
    raise AssertionError("rank %d: no error, expected %s" % (r, words))


# 1. Collectives: rank q has 2 + q steps; in step i the ranks q < i - 1 have joined.
for epoch in range(2):  # the same names again: the response cache after a join
    for i in range(2 + r):
        active = [q for q in range(n) if i < 2 + q]
        joined = [q for q in range(n) if q not in active]
        x = mx.nd.full((5,), r + 1.0)
        want = float(sum(q + 1 for q in active))
        s = hvd.allreduce(x, op=hvd.Sum, name="sum.%d" % i)
        a = hvd.allreduce(x, name="avg.%d" % i)
        g = hvd.grouped_allreduce([x, x.astype("float64") * 2], op=hvd.Sum, name="grp.%d" % i)
        y = x.copy()
        hvd.allreduce_(y, op=hvd.Sum, name="inplace.%d" % i)
        assert np.allclose(s.asnumpy(), want), (r, i, s.asnumpy(), want)
        assert np.allclose(a.asnumpy(), want / n), (r, i, a.asnumpy())  # divided by size
        assert np.allclose(g[1].asnumpy(), 2 * want) and g[1].dtype == np.float64
        assert np.allclose(y.asnumpy(), want)
        if joined:
            words = ("rank" if len(joined) == 1 else "ranks", ", ".join(map(str, joined)),
                     "joined (hvd.join())")
            expect_error(lambda: hvd.broadcast(x, root_rank=n - 1, name="bc.%d" % i).asnumpy(),
                         "broadcast 'bc.%d'" % i, *words)
            expect_error(lambda: hvd.allgather(x, name="ag.%d" % i).asnumpy(), *words)
            expect_error(lambda: hvd.allreduce(x, op=hvd.Max, name="max.%d" % i).asnumpy(),
                         "allreduce (Max)", *words)
        # mxhorovod's own checks: the joined ranks add the op's identity.
        with identity_when_joined():
            for op, want_op, dt in ((hvd.Max, max, "float16"), (hvd.Min, min, "int32"),
                                    (hvd.Product, np.prod, "float64")):
                got = hvd.allreduce(x.astype(dt) - 2, op=op, name="id.%s.%d" % (dt, i))
                want_id = float(want_op([q + 1.0 - 2 for q in active]))
                assert np.allclose(got.asnumpy(), want_id), (r, i, dt, got.asnumpy(), want_id)
    last = hvd.join()
    assert last == n - 1, (r, last)

# 2. A second join() while one waits: refused at once; the first one completes.
if r == 0:
    first = []
    waiting = threading.Thread(target=lambda: first.append(hvd.join()))
    waiting.start()
    time.sleep(0.5)
    expect_error(hvd.join, "another join() of this rank (0) is still waiting")
    waiting.join()
    assert first == [n - 1], first
else:
    time.sleep(1.0)
    assert hvd.join() == n - 1

# 3. DistributedTrainer over uneven shards, with join: rank q has 3 + q batches; its last
# batch holds 2 rows instead of 4. Each step equals one process on the active ranks'
# concatenated batch (SGD with momentum: the momenta match too).
rng = np.random.RandomState(1)
steps = 2 + n
x = rng.randn(steps, n, 4, IN).astype(np.float32)
y = rng.randint(0, 3, size=(steps, n, 4)).astype(np.float32)
rows = [[4] * (2 + q) + [2] for q in range(n)]  # rows[q][i]: rank q's batch i
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
caught = warnings.catch_warnings(record=True)
seen_warnings = caught.__enter__()
warnings.simplefilter("always")
for c, kw in enumerate(({}, {"gradient_as_bucket_view": True}, {"num_groups": 1},
                        "DistributedOptimizer")):
    net = mlp("tr%d_" % c)
    ref = mlp("ref%d_" % c)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    copy_params(net, ref)
    opt = {"learning_rate": 0.1, "momentum": 0.9}
    if kw == "DistributedOptimizer":
        trainer = gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(
            mx.optimizer.SGD(**opt)))
    else:
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", opt, **kw)
    local = gluon.Trainer(ref.collect_params(), "sgd", opt, kvstore=None)
    for i in range(steps):
        if i < len(rows[r]):
            b = rows[r][i]
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(x[i, r, :b])), mx.nd.array(y[i, r, :b]))
            loss.backward()
            trainer.step(b)
        # The reference: every rank still in, on its rows of this step.
        qs = [q for q in range(n) if i < len(rows[q])]
        if not qs:
            continue
        bx = np.concatenate([x[i, q, :rows[q][i]] for q in qs])
        by = np.concatenate([y[i, q, :rows[q][i]] for q in qs])
        with autograd.record():
            loss = loss_fn(ref(mx.nd.array(bx)), mx.nd.array(by))
        loss.backward()
        local.step(len(bx))
        if i < len(rows[r]):
            for p, q in zip(net.collect_params().values(), ref.collect_params().values()):
                assert np.allclose(p.data().asnumpy(), q.data().asnumpy(), rtol=1e-5,
                                   atol=1e-6), (r, kw, i, p.name)
    last = hvd.join()
    assert last == n - 1
    # The joined ranks missed the last updates: the last rank to join has them all.
    hvd.broadcast_parameters(net.collect_params(), root_rank=last)
    hvd.broadcast_optimizer_state(trainer, root_rank=last)
    # A second epoch of equal steps after the join: the checks count anew.
    for i in range(3):
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x[i, r])), mx.nd.array(y[i, r]))
        loss.backward()
        trainer.step(4)
    for p in net.collect_params().values():  # identical everywhere (the check agrees)
        mine = p.data().asnumpy()
        root = hvd.broadcast(p.data(), root_rank=0, name="cmp." + p.name).asnumpy()
        assert np.array_equal(mine, root), (r, c, p.name)
caught.__exit__(None, None, None)
bad = [str(w.message) for w in seen_warnings if "hvd" in str(w.message) or "rank" in str(w.message)]
assert not bad, (r, bad)
print("RANK %d OK" % r, flush=True)

# 3b. Different batch sizes on the ranks, no join: the ranks stay bit-identical (every
# rank scales by the same total), and equal one process on the concatenated batch.
for c, kind in enumerate(("trainer", "optimizer")):
    net, ref = mlp("bs%d_" % c), mlp("bsref%d_" % c)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    copy_params(net, ref)
    opt = {"learning_rate": 0.1, "momentum": 0.9}
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", opt) if kind == "trainer" \
        else gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(mx.optimizer.SGD(**opt)))
    local = gluon.Trainer(ref.collect_params(), "sgd", opt, kvstore=None)
    sizes = [1 + (q + i) % 4 for i in range(3) for q in range(n)]  # sizes[i * n + q]
    for i in range(3):
        b = sizes[i * n + r]
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x[i, r, :b])), mx.nd.array(y[i, r, :b]))
        loss.backward()
        trainer.step(b)
        bx = np.concatenate([x[i, q, :sizes[i * n + q]] for q in range(n)])
        by = np.concatenate([y[i, q, :sizes[i * n + q]] for q in range(n)])
        with autograd.record():
            loss = loss_fn(ref(mx.nd.array(bx)), mx.nd.array(by))
        loss.backward()
        local.step(len(bx))
    for p, q in zip(net.collect_params().values(), ref.collect_params().values()):
        mine = p.data().asnumpy()
        every = hvd.allgather_object(mine, name="bits.%s" % p.name)
        assert all(np.array_equal(e, mine) for e in every), (r, kind, p.name)
        assert np.allclose(mine, q.data().asnumpy(), rtol=1e-5, atol=1e-6), (r, kind, p.name)

# A batch size that is not a number >= 0 on one rank: ValueError on every rank.
net = mlp("badbs_")
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
with autograd.record():
    loss = loss_fn(net(mx.nd.array(x[0, r])), mx.nd.array(y[0, r]))
loss.backward()
expect_error(lambda: trainer.step(float("nan") if r == 0 else 4),
             "DistributedTrainer.step: the ranks' batch sizes add up to nan",
             "this rank passed %s" % ("nan" if r == 0 else "4"))
# Not a number at all on rank 0: TypeError there (as gluon.Trainer.step), ValueError on
# the others; the next step works.
for p in net.collect_params().values():
    p.zero_grad()
try:
    trainer.step(None if r == 0 else 4)
    raise AssertionError("rank %d: step(None) did not raise" % r)
except (TypeError, ValueError) as e:
    assert isinstance(e, TypeError) == (r == 0), (r, repr(e))
    assert ("got None" if r == 0 else "add up to nan") in str(e), (r, str(e))
trainer.step(4)

# 4. hvd.DistributedSampler without padding + join(): every sample exactly once per epoch,
# though the shares differ in length (10 samples on n ranks, batches of 2, last kept).
data = gluon.data.ArrayDataset(np.arange(10, dtype=np.float32).reshape(10, 1))
sampler = hvd.DistributedSampler(data, seed=3)
assert len(sampler) == len(range(r, 10, n))
for epoch in range(2):
    sampler.set_epoch(epoch)
    loader = gluon.data.DataLoader(data, batch_size=2, sampler=sampler, last_batch="keep")
    seen = []
    for batch in loader:
        seen += batch.asnumpy().ravel().astype(int).tolist()
        total = hvd.allreduce(mx.nd.array([batch.shape[0]]), op=hvd.Sum, name="rows")
        total.wait_to_read()
    hvd.join()
    every = sorted(sum(hvd.allgather_object(seen, name="seen"), []))
    assert every == list(range(10)), (r, epoch, every)
even = hvd.DistributedSampler(10, drop_last=True, shuffle=False)
assert list(even) == list(range(r, 10 - 10 % n, n)) and len(even) == 10 // n
try:
    hvd.DistributedSampler(10, rank=n)
    raise AssertionError("no error")
except ValueError as e:
    assert "rank %d is not in [0, %d)" % (n, n) in str(e), e
print("RANK %d SAMPLER OK" % r, flush=True)
