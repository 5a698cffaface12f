"""k steps on N ranks == k steps of one process on the concatenated batch (issue 3, item 3).

Each scenario trains a distributed model on this rank's shard and a local reference on the
whole global batch, then compares every parameter on every rank. Usage:
    train_equivalence.py [scenario ...]     (default: all)
"""

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd
from training_common import (assert_close, assert_same_on_all_ranks, copy_params, global_data, run_scenarios,
                          mlp, optimizer, param_arrays, shard, IN, HIDDEN, CLASSES)

STEPS, B = 3, 4
LR = {"sgd": 0.1, "adam": 0.01, "nag": 0.1, "lamb": 0.01}


def gluon_run(make_trainer, opt_kind, tag):
    """make_trainer(params, optimizer) -> trainer for the distributed net."""
    x, y = global_data(STEPS, B)
    xs, ys = shard(x, B), shard(y, B)
    net = mlp(tag + "_dist_")
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    ref = mlp(tag + "_ref_")
    copy_params(net, ref)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = make_trainer(net.collect_params(), optimizer(opt_kind))
    ref_trainer = gluon.Trainer(ref.collect_params(), optimizer(opt_kind), kvstore=None)
    for s in range(STEPS):
        for model, tr, xb, yb in ((net, trainer, xs[s], ys[s]), (ref, ref_trainer, x[s], y[s])):
            with autograd.record():
                loss = loss_fn(model(mx.nd.array(xb)), mx.nd.array(yb))
            loss.backward()
            tr.step(xb.shape[0])
    got, want = param_arrays(net), param_arrays(ref)
    assert_close(got, want, LR[opt_kind], tag)
    assert_same_on_all_ranks(got, tag)


def module_symbol():
    data = mx.sym.Variable("data")
    h = mx.sym.Activation(mx.sym.FullyConnected(data, num_hidden=HIDDEN, name="fc1"),
                          act_type="tanh")
    out = mx.sym.FullyConnected(h, num_hidden=CLASSES, name="fc2")
    return mx.sym.SoftmaxOutput(out, name="softmax")


def module_run(opt_kind, tag, use_fit, num_groups=0):
    x, y = global_data(STEPS, B, seed=1)
    xs, ys = shard(x, B), shard(y, B)
    mods = []
    for batch, wrapped in ((B, True), (B * hvd.size(), False)):
        mod = mx.mod.Module(module_symbol(), data_names=["data"], label_names=["softmax_label"])
        mod.bind(data_shapes=[("data", (batch, IN))], label_shapes=[("softmax_label", (batch,))])
        mx.random.seed(10 + hvd.rank())
        mod.init_params(mx.init.Uniform(0.5))
        mods.append(mod)
    dist, ref = mods
    arg, aux = dist.get_params()
    hvd.broadcast_parameters(arg, root_rank=0)
    hvd.broadcast_parameters(aux, root_rank=0)
    dist.set_params(arg, aux)
    ref.set_params(arg, aux)

    opts = []
    for batch, wrapped in ((B, True), (B * hvd.size(), False)):
        opt = optimizer(opt_kind, rescale_grad=1.0 / batch)
        opt.set_lr_mult({"fc2_bias": 0.5})
        if wrapped:
            opt = hvd.DistributedOptimizer(opt, num_groups=num_groups)
        opts.append(opt)

    for mod, opt, xd, yd, batch in ((dist, opts[0], xs, ys, B),
                                    (ref, opts[1], x, y, B * hvd.size())):
        xd = xd.reshape(-1, IN)
        yd = yd.reshape(-1)
        if use_fit:
            it = mx.io.NDArrayIter(xd, yd, batch_size=batch, label_name="softmax_label")
            mod.fit(it, num_epoch=1, optimizer=opt, kvstore=None)
        else:
            mod.init_optimizer(kvstore=None, optimizer=opt)
            for s in range(STEPS):
                db = mx.io.DataBatch([mx.nd.array(xd[s * batch:(s + 1) * batch])],
                                     [mx.nd.array(yd[s * batch:(s + 1) * batch])])
                mod.forward_backward(db)
                mod.update()
    got = [v.asnumpy() for _, v in sorted(dist.get_params()[0].items())]
    want = [v.asnumpy() for _, v in sorted(ref.get_params()[0].items())]
    assert_close(got, want, LR[opt_kind], tag)
    assert_same_on_all_ranks(got, tag)


SCENARIOS = {
    "trainer_sgd": lambda: gluon_run(
        lambda p, o: hvd.DistributedTrainer(p, o), "sgd", "trainer_sgd"),
    "trainer_adam": lambda: gluon_run(
        lambda p, o: hvd.DistributedTrainer(p, o), "adam", "trainer_adam"),
    "trainer_groups_predivide": lambda: gluon_run(
        lambda p, o: hvd.DistributedTrainer(p, "sgd", {"learning_rate": 0.1, "momentum": 0.9,
                                                      "wd": 1e-3},
                                            gradient_predivide_factor=2.0, num_groups=2),
        "sgd", "trainer_groups"),
    "trainer_nag": lambda: gluon_run(
        lambda p, o: hvd.DistributedTrainer(p, o), "nag", "trainer_nag"),
    "opt_in_gluon_trainer_lamb": lambda: gluon_run(
        lambda p, o: gluon.Trainer(p, hvd.DistributedOptimizer(o)), "lamb", "optgluon_lamb"),
    "opt_in_gluon_trainer_sgd": lambda: gluon_run(
        lambda p, o: gluon.Trainer(p, hvd.DistributedOptimizer(o)), "sgd", "optgluon_sgd"),
    "opt_in_gluon_trainer_adam": lambda: gluon_run(
        lambda p, o: gluon.Trainer(p, hvd.DistributedOptimizer(o, num_groups=2)), "adam",
        "optgluon_adam"),
    "module_fit_sgd": lambda: module_run("sgd", "module_fit_sgd", use_fit=True),
    "module_fit_adam": lambda: module_run("adam", "module_fit_adam", use_fit=True),
    "module_manual_sgd_groups": lambda: module_run("sgd", "module_manual", use_fit=False,
                                                   num_groups=2),
}


if __name__ == "__main__":
    run_scenarios(SCENARIOS, sorted(SCENARIOS))
