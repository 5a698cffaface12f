"""DistributedTrainer(backward_passes_per_step=k) (issue 49 item 1; run by
tests/training/test_accumulation.py on 2 and 3 ranks): k backward passes then one
step(k * B) on every rank equals one process stepping on the whole batch (every rank, every
pass), for SGD with momentum and Adam, with bucket views and fp16 compression, and in the
manual pattern allreduce_grads() -> clip by global norm -> update(). A step after fewer
passes raises, saying how many are missing. Prints RANK <r> OK."""
import mxnet as mx
import numpy as np
from mxnet import gluon

import mxhorovod as hvd
from training_common import assert_close, global_data, mlp, param_arrays

hvd.init()
r, n = hvd.rank(), hvd.size()
B, STEPS = 2, 3
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()


def net_like(prefix, weights):
    net = mlp(prefix)
    for p, v in zip(net.collect_params().values(), weights):
        p.set_data(mx.nd.array(v))
    return net


def micro_rows(k, m):
    """Rank r's rows of micro-batch m (of k) in a step's global batch of n * k * B rows."""
    start = (m * n + r) * B
    return slice(start, start + B)


def backward(net, x, y):
    with mx.autograd.record():
        loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y))
    loss.backward()


def clip(params, max_norm):
    grads = [p.grad() for p in params if p.grad_req != "null"]
    gluon.utils.clip_global_norm(grads, max_norm)


def run(kind, k, manual=False, **trainer_kwargs):
    x, y = global_data(STEPS, k * B, seed=7)  # (steps, n * k * B, ...)
    weights = hvd.broadcast_object(param_arrays(mlp("acc_init_")), root_rank=0)
    opt = {"sgd": ("sgd", {"learning_rate": 0.1, "momentum": 0.9}),
           "adam": ("adam", {"learning_rate": 0.01})}[kind]
    ref = net_like("acc_ref_", weights)
    ref_trainer = gluon.Trainer(ref.collect_params(), opt[0], dict(opt[1]), kvstore=None)
    net = net_like("acc_%s_%d_" % (kind, k), weights)
    trainer = hvd.DistributedTrainer(net.collect_params(), opt[0], dict(opt[1]),
                                     backward_passes_per_step=k, **trainer_kwargs)
    assert all(p.grad_req == "add" for p in net.collect_params().values()), r
    for s in range(STEPS):
        backward(ref, x[s], y[s])
        for m in range(k):
            rows = micro_rows(k, m)
            backward(net, x[s, rows], y[s, rows])
        if manual:
            # The reference's gradient is the whole batch's sum; the ranks' after
            # allreduce_grads is its average over ranks: n times smaller.
            clip(ref.collect_params().values(), 0.5 * n)
            ref_trainer.update(n * k * B)
            trainer.allreduce_grads()
            clip(net.collect_params().values(), 0.5)
            trainer.update(k * B)
        else:
            ref_trainer.step(n * k * B)
            trainer.step(k * B)
        for p in net.collect_params().values():
            assert not p.grad().asnumpy().any(), (r, "gradient not zeroed", p.name)
    # assert_close: rtol 1e-4 and atol 1e-5 * tol; float16 gradients carry 1e-3 rounding.
    tol = 10.0 if trainer_kwargs.get("compression") is hvd.Compression.fp16 else 0.1
    assert_close(param_arrays(net), param_arrays(ref), tol,
                 "%s k=%d manual=%s %s" % (kind, k, manual, sorted(trainer_kwargs)))
    return net, trainer


run("sgd", 2)
run("adam", 3)
run("sgd", 2, manual=True)
run("sgd", 2, gradient_as_bucket_view=True)
net, trainer = run("sgd", 2, compression=hvd.Compression.fp16)

# A step after 1 of 2 passes: refused on every rank (a local check: nothing is sent).
x, y = global_data(1, B, seed=9)
backward(net, x[0, r * B:(r + 1) * B], y[0, r * B:(r + 1) * B])
for call in (lambda: trainer.step(B), lambda: trainer.allreduce_grads(),
             lambda: trainer.update(B)):
    try:
        call()
    except ValueError as e:
        assert "1 of the 2 backward passes" in str(e) and "1 missing" in str(e), str(e)
    else:
        raise AssertionError("rank %d: a step after 1 of 2 passes ran" % r)
backward(net, x[0, r * B:(r + 1) * B], y[0, r * B:(r + 1) * B])
trainer.step(2 * B)  # now 2 passes: fine

# A parameter unfrozen after the trainer was made (grad_req='write'): its gradient kept the
# last pass only; refused, naming it.
frozen = mlp("acc_frozen_")
first = list(frozen.collect_params().values())[0]
first.grad_req = "null"
ft = hvd.DistributedTrainer(frozen.collect_params(), "sgd", backward_passes_per_step=2)
first.grad_req = "write"
for _ in range(2):
    backward(frozen, x[0, r * B:(r + 1) * B], y[0, r * B:(r + 1) * B])
try:
    ft.step(2 * B)
except ValueError as e:
    assert "'%s' has grad_req='write'" % first.name in str(e), str(e)
else:
    raise AssertionError("rank %d: a written gradient accumulated" % r)

# row_sparse gradients cannot be added up in MXNet: refused when the trainer is made.
emb = gluon.nn.Embedding(10, 4, sparse_grad=True, prefix="acc_emb_")
emb.initialize()
try:
    hvd.DistributedTrainer(emb.collect_params(), "sgd", backward_passes_per_step=2)
except ValueError as e:
    assert "'acc_emb_weight' has a row_sparse gradient" in str(e), str(e)
else:
    raise AssertionError("rank %d: row_sparse accumulation accepted" % r)

try:
    hvd.DistributedTrainer(mlp("acc_bad_").collect_params(), "sgd", backward_passes_per_step=0)
except ValueError as e:
    assert "backward_passes_per_step must be an int >= 1" in str(e), str(e)
else:
    raise AssertionError("backward_passes_per_step=0 accepted")
print("RANK %d OK" % r, flush=True)
