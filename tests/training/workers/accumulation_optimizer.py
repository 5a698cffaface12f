"""DistributedOptimizer(backward_passes_per_step=k) (issue 49 item 1; run by
tests/training/test_accumulation.py on 2 and 3 ranks): k backward passes then one update
equals one process updating on the whole batch (every rank, every pass), for SGD with
momentum (k=2; MXNet's SGD hands the wrapper several indices per call) and Adam (k=3), in
a gluon.Trainer (step(k * B)) and in a Module bound with grad_req='add' (rescale_grad
1/(k * B), mod.update()). An update after too few passes raises, saying how many are
missing; a Module bound with grad_req='write' is refused at init_optimizer. And the
accumulation by hand that docs/kvstore.md gives for kvstore 'horovod'. Prints
RANK <r> OK."""
import warnings

import mxnet as mx
from mxnet import gluon

import mxhorovod as hvd
from training_common import (CLASSES, HIDDEN, IN, assert_close, global_data, mlp,
                             param_arrays)

hvd.init()
r, n = hvd.rank(), hvd.size()
B, STEPS = 2, 3
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
OPTS = {"sgd": lambda rescale: mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=1e-3,
                                                rescale_grad=rescale),
        "adam": lambda rescale: mx.optimizer.Adam(learning_rate=0.01, wd=1e-3,
                                                  rescale_grad=rescale)}


def micro_rows(k, m):
    """Rank r's rows of micro-batch m (of k) in a step's global batch of n * k * B rows."""
    start = (m * n + r) * B
    return slice(start, start + B)


def expect_refused(call, *texts):
    try:
        call()
    except ValueError as e:
        assert all(t in str(e) for t in texts), (r, str(e))
    else:
        raise AssertionError("rank %d: not refused: %s" % (r, texts))


# --- gluon.Trainer(params, DistributedOptimizer(opt, backward_passes_per_step=k)) ---

def net_like(prefix, weights):
    net = mlp(prefix)
    for p, v in zip(net.collect_params().values(), weights):
        p.set_data(mx.nd.array(v))
    return net


def backward(net, x, y):
    with mx.autograd.record():
        loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y))
    loss.backward()


def gluon_run(kind, k):
    x, y = global_data(STEPS, k * B, seed=7)  # (steps, n * k * B, ...)
    weights = hvd.broadcast_object(param_arrays(mlp("acco_init_")), root_rank=0)
    ref = net_like("acco_ref_", weights)
    ref_trainer = gluon.Trainer(ref.collect_params(), OPTS[kind](1.0), kvstore=None)
    for s in range(STEPS):  # first: the process counts the reference's passes too
        backward(ref, x[s], y[s])
        ref_trainer.step(n * k * B)
    net = net_like("acco_%s_%d_" % (kind, k), weights)
    opt = hvd.DistributedOptimizer(OPTS[kind](1.0), backward_passes_per_step=k)
    trainer = gluon.Trainer(net.collect_params(), opt, kvstore=None)
    assert all(p.grad_req == "add" for p in net.collect_params().values()), r
    for s in range(STEPS):
        for m in range(k):
            if m == 1 and s == 0:  # too early: refused before anything is sent
                expect_refused(lambda: trainer.step(k * B), "gluon.Trainer.step: 1 of the %d "
                               "backward passes" % k, "%d missing" % (k - 1))
            rows = micro_rows(k, m)
            backward(net, x[s, rows], y[s, rows])
        trainer.step(k * B)
        for p in net.collect_params().values():
            assert not p.grad().asnumpy().any(), (r, "gradient not zeroed", p.name)
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "gluon %s k=%d" % (kind, k))
    # A second update without passes is refused too (update: as step).
    expect_refused(lambda: trainer.update(k * B), "0 of the %d backward passes" % k)


def kvstore_by_hand(k):
    """docs/kvstore.md: the store takes no backward_passes_per_step; by hand, grad_req
    'add', step(k * B * size) and zero_grad() equal one process on the whole batch."""
    x, y = global_data(STEPS, k * B, seed=13)
    weights = hvd.broadcast_object(param_arrays(mlp("acck_init_")), root_rank=0)
    ref = net_like("acck_ref_", weights)
    ref_trainer = gluon.Trainer(ref.collect_params(), OPTS["sgd"](1.0), kvstore=None)
    net = net_like("acck_net_", weights)
    trainer = gluon.Trainer(net.collect_params(), OPTS["sgd"](1.0), kvstore="horovod")
    net.collect_params().setattr("grad_req", "add")
    for s in range(STEPS):
        backward(ref, x[s], y[s])
        ref_trainer.step(n * k * B)
        for m in range(k):
            rows = micro_rows(k, m)
            backward(net, x[s, rows], y[s, rows])
        trainer.step(k * B * n)
        net.collect_params().zero_grad()
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "kvstore by hand k=%d" % k)


# --- Module, bound with grad_req='add' ---

def module_symbol():
    data = mx.sym.Variable("data")
    h = mx.sym.Activation(mx.sym.FullyConnected(data, num_hidden=HIDDEN, name="fc1"),
                          act_type="tanh")
    out = mx.sym.FullyConnected(h, num_hidden=CLASSES, name="fc2")
    return mx.sym.SoftmaxOutput(out, name="softmax")


def module(batch, grad_req="write"):
    mod = mx.mod.Module(module_symbol(), data_names=["data"], label_names=["softmax_label"])
    mod.bind(data_shapes=[("data", (batch, IN))],
             label_shapes=[("softmax_label", (batch,))], grad_req=grad_req)
    mx.random.seed(10 + r)
    mod.init_params(mx.init.Uniform(0.5))
    return mod


def batch_of(x, y):
    return mx.io.DataBatch([mx.nd.array(x)], [mx.nd.array(y)])


def module_run(kind, k):
    x, y = global_data(STEPS, k * B, seed=11)
    dist, ref = module(B, "add"), module(n * k * B)
    arg, aux = dist.get_params()
    hvd.broadcast_parameters(arg, root_rank=0)
    dist.set_params(arg, aux)
    ref.set_params(arg, aux)
    ref.init_optimizer(kvstore=None, optimizer=OPTS[kind](1.0 / (n * k * B)))
    for s in range(STEPS):  # first: the process counts the reference's passes too
        ref.forward_backward(batch_of(x[s], y[s]))
        ref.update()
    with warnings.catch_warnings():  # MXNet: "rescale_grad is not normalized to 1/batch"
        warnings.simplefilter("ignore")
        dist.init_optimizer(kvstore=None, optimizer=hvd.DistributedOptimizer(
            OPTS[kind](1.0 / (k * B)), backward_passes_per_step=k))
    for s in range(STEPS):
        for m in range(k):
            if m == k - 1 and s == 1:
                expect_refused(dist.update, "Module.update: %d of the %d backward passes"
                               % (k - 1, k), "1 missing", "rescale_grad")
            rows = micro_rows(k, m)
            dist.forward_backward(batch_of(x[s, rows], y[s, rows]))
        dist.update()
        for g in dist._exec_group.grad_arrays:
            assert not g[0].asnumpy().any(), (r, "module gradient not zeroed")
    got = [v.asnumpy() for _, v in sorted(dist.get_params()[0].items())]
    want = [v.asnumpy() for _, v in sorted(ref.get_params()[0].items())]
    assert_close(got, want, 0.1, "module %s k=%d" % (kind, k))


gluon_run("sgd", 2)
gluon_run("adam", 3)
kvstore_by_hand(2)
module_run("sgd", 2)
module_run("adam", 3)

# A Module bound with grad_req='write' cannot add up its gradients: refused at once.
expect_refused(lambda: module(B).init_optimizer(kvstore=None, optimizer=hvd.DistributedOptimizer(
    OPTS["sgd"](1.0), backward_passes_per_step=2)), "Module.init_optimizer",
    "grad_req='write'", "grad_req='add'")
expect_refused(lambda: hvd.DistributedOptimizer(OPTS["sgd"](1.0), backward_passes_per_step=0),
               "backward_passes_per_step must be an int >= 1")
print("RANK %d OK" % r, flush=True)
