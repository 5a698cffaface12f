"""DistributedTrainer(op=hvd.Adasum) and DistributedOptimizer(op=hvd.Adasum) (issue 49):
with identical data on every rank, Adasum of identical deltas is that delta, so training
equals one process (SGD with momentum, Adam); with different data the ranks' weights stay
identical and move by the Adasum of their local steps (checked for one SGD step against
a numpy Adasum of the ranks' deltas, gathered). Bad arguments are refused. Prints RANK <r> OK."""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxhorovod as hvd
from training_common import IN, copy_params, mlp

hvd.init()
r, n = hvd.rank(), hvd.size()
rng = np.random.RandomState(2)
STEPS, B = 4, 6
X = rng.randn(STEPS, n, B, IN).astype(np.float32)
Y = rng.randint(0, 3, size=(STEPS, n, B)).astype(np.float32)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()


def fwd_bwd(net, x, y):
    with autograd.record():
        loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y))
    loss.backward()


def make(kind, net, opt_name, opt):
    if kind == "trainer":
        return hvd.DistributedTrainer(net.collect_params(), opt_name, opt, op=hvd.Adasum)
    return gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(
        mx.optimizer.create(opt_name, **opt), op=hvd.Adasum), kvstore=None)


# 1. Identical data everywhere: equals one process, step by step.
for kind in ("trainer", "optimizer"):
    for opt_name, opt in (("sgd", {"learning_rate": 0.1, "momentum": 0.9}),
                          ("adam", {"learning_rate": 0.01})):
        tag = "%s_%s_" % (kind, opt_name)
        net, ref = mlp("n" + tag), mlp("r" + tag)
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
        copy_params(net, ref)
        trainer = make(kind, net, opt_name, opt)
        local = gluon.Trainer(ref.collect_params(), opt_name, opt, kvstore=None)
        for s in range(STEPS):
            fwd_bwd(net, X[s, 0], Y[s, 0])  # rank 0's rows on every rank
            trainer.step(B)
            fwd_bwd(ref, X[s, 0], Y[s, 0])
            local.step(B)
            for p, q in zip(net.collect_params().values(), ref.collect_params().values()):
                assert np.allclose(p.data().asnumpy(), q.data().asnumpy(), rtol=1e-5,
                                   atol=1e-6), (r, tag, s, p.name)


def adasum_pair(a, b):
    """Adasum of two deltas (float64 dot products)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    dot, na, nb = a.dot(b), a.dot(a), b.dot(b)
    ca = 1.0 - dot / (2 * na) if na > 0 else 0.0
    cb = 1.0 - dot / (2 * nb) if nb > 0 else 0.0
    return ca * a + cb * b


# 2. Different data: one plain SGD step; the weights equal a tree of pairwise Adasums
# (any tree gives the same for 2 ranks; for more, the docs' order: checked loosely).
net = mlp("diff_")
hvd.broadcast_parameters(net.collect_params(), root_rank=0)
before = {p.name: p.data().asnumpy() for p in net.collect_params().values()}
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.5},
                                 op=hvd.Adasum)
fwd_bwd(net, X[0, r], Y[0, r])
local_delta = {p.name: -0.5 * p.lr_mult * p.grad().asnumpy() / B
               for p in net.collect_params().values()}
trainer.step(B)
deltas = hvd.allgather_object(local_delta, name="adasum.deltas")
for p in net.collect_params().values():
    got = p.data().asnumpy()
    every = hvd.allgather_object(got, name="adasum.w." + p.name)
    assert all(np.array_equal(every[0], e) for e in every), (r, p.name)  # identical
    if n == 2:
        want = before[p.name] + adasum_pair(deltas[0][p.name].ravel(),
                                            deltas[1][p.name].ravel()).reshape(got.shape)
        assert np.allclose(got, want, rtol=1e-4, atol=1e-6), (r, p.name)

# 2b. A rank's local step raises (a stale gradient on rank 0, caught): its zero deltas are
# still sent, the peers do not wait, and the weights stay identical.
net = mlp("stale_")
hvd.broadcast_parameters(net.collect_params(), root_rank=0)
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.5},
                                 op=hvd.Adasum)
fwd_bwd(net, X[1, r], Y[1, r])
trainer.step(B)
if r != 0:
    fwd_bwd(net, X[2, r], Y[2, r])
try:
    trainer.step(B)  # rank 0: no backward since the last step
    assert r != 0, "rank 0 should have raised"
except UserWarning as e:
    assert r == 0 and "has not been updated by backward" in str(e), (r, e)
for p in net.collect_params().values():
    every = hvd.allgather_object(p.data().asnumpy(), name="stale." + p.name)
    assert all(np.array_equal(every[0], e) for e in every), (r, p.name)

# 3. Refused: compression, predivide, bucket views, another op.
for bad in ({"compression": hvd.Compression.fp16}, {"gradient_predivide_factor": 2.0},
            {"gradient_as_bucket_view": True}, {"op": hvd.Sum}):
    kw = dict({"op": hvd.Adasum}, **bad)
    try:
        hvd.DistributedTrainer(mlp("bad%d_" % len(str(bad))).collect_params(), "sgd",
                               {"learning_rate": 0.1}, **kw)
        raise AssertionError("accepted %s" % bad)
    except ValueError as e:
        assert "Adasum" in str(e) or "op must be hvd.Average or hvd.Adasum, got Sum" in str(e), e
print("RANK %d OK" % r, flush=True)
