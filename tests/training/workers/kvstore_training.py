"""An unchanged gluon.Trainer with kvstore 'horovod' on N ranks == one process on the
concatenated batch (step given the global batch size, as with dist_sync), and what MXNet
refuses with it. Usage: kvstore_training.py [scenario ...]   (default: all)
"""
import os

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd
from training_common import (assert_close, assert_same_on_all_ranks, global_data, mlp,
                          optimizer, param_arrays, run_scenarios, shard)

STEPS, B = 3, 4
LR = {"sgd": 0.1, "adam": 0.01}


def rank0_copy(net, prefix):
    """A reference net holding rank 0's initial values of net."""
    ref = mlp(prefix)
    for k, (p, q) in enumerate(zip(net.collect_params().values(), ref.collect_params().values())):
        q.set_data(hvd.broadcast(p.data(), root_rank=0, name="%s.init.%d" % (prefix, k)))
    return ref


def same_start(tag):
    """A net with rank 0's initial values on every rank (as after broadcast_parameters):
    the Trainer broadcasts only at the first step, after the first backward."""
    net = mlp(tag + "_dist_")  # different initial values on every rank
    for k, p in enumerate(net.collect_params().values()):
        p.set_data(hvd.broadcast(p.data(), root_rank=0, name="%s.start.%d" % (tag, k)))
    return net


def forward_backward(model, xb, yb, ctxs):
    """Loss summed over the batch; the batch split over ctxs (one slice per device)."""
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    xs = gluon.utils.split_and_load(mx.nd.array(xb), ctxs, even_split=True)
    ys = gluon.utils.split_and_load(mx.nd.array(yb), ctxs, even_split=True)
    with autograd.record():
        losses = [loss_fn(model(x), y) for x, y in zip(xs, ys)]
    autograd.backward(losses)


def train_and_compare(tag, kvstore, opt_kind="sgd", ctxs=(mx.cpu(0),), dist_batch=None,
                      opts=None):
    """Trains a net on this rank's shard with kvstore and a reference on the whole batch;
    compares every parameter. dist_batch: what the script passes to step (default: the
    global batch); opts: (optimizer, reference's optimizer), default optimizer(opt_kind)."""
    n = hvd.size()
    x, y = global_data(STEPS, B)
    xs, ys = shard(x, B), shard(y, B)
    net = same_start(tag)
    ref = rank0_copy(net, tag + "_ref_")
    if len(ctxs) > 1:
        net.collect_params().reset_ctx(list(ctxs))
    dist_opt, ref_opt = opts or (optimizer(opt_kind), optimizer(opt_kind))
    trainer = gluon.Trainer(net.collect_params(), dist_opt, kvstore=kvstore)
    ref_trainer = gluon.Trainer(ref.collect_params(), ref_opt, kvstore=None)
    for s in range(STEPS):
        forward_backward(net, xs[s], ys[s], list(ctxs))
        trainer.step(dist_batch or B * n)
        forward_backward(ref, x[s], y[s], [mx.cpu(0)])
        ref_trainer.step(B * n)
    assert trainer._kvstore is not None and trainer._kvstore.type == "horovod", trainer._kvstore
    assert trainer._update_on_kvstore is False
    for ctx in ctxs:
        got = [p.data(ctx).asnumpy() for p in net.collect_params().values()]
        assert_close(got, param_arrays(ref), LR[opt_kind], "%s on %s" % (tag, ctx))
    assert_same_on_all_ranks(param_arrays(net), tag)


def instance():
    train_and_compare("inst_sgd", mx.kv.create("horovod"), "sgd")
    train_and_compare("inst_adam", mx.kv.create("horovod"), "adam")


def string():
    # kvstore='horovod' with one device: MXNet alone would drop the kvstore (no sync).
    train_and_compare("str_sgd", "horovod", "sgd")
    train_and_compare("str_upper", "Horovod", "adam")


def devices():
    # Two devices per rank: pushpull sums the devices, then the ranks.
    train_and_compare("dev_inst", mx.kv.create("horovod"), "sgd", ctxs=(mx.cpu(0), mx.cpu(1)))
    train_and_compare("dev_str", "horovod", "adam", ctxs=(mx.cpu(0), mx.cpu(1)))


def per_rank_batch():
    # step(per-rank batch): the summed gradient makes the update size() times larger, the
    # same as one process with the learning rate times size() (plain SGD, no weight decay).
    opts = (mx.optimizer.SGD(learning_rate=0.1), mx.optimizer.SGD(learning_rate=0.1 * hvd.size()))
    train_and_compare("per_rank", mx.kv.create("horovod"), "sgd", dist_batch=B, opts=opts)


def first_step_broadcast():
    # Different initial values on every rank: the first step() broadcasts rank 0's values
    # (Trainer._init_params) and applies the sum of the gradients, each taken at its rank's
    # own initial values (as with dist_sync); afterwards every rank holds the same values.
    n = hvd.size()
    x, y = global_data(1, B, seed=4)
    net = mlp("first_")
    w0 = [hvd.broadcast(p.data(), 0, name="first.w0.%d" % k).asnumpy()
          for k, p in enumerate(net.collect_params().values())]
    trainer = gluon.Trainer(net.collect_params(), mx.optimizer.SGD(learning_rate=0.1),
                            kvstore=mx.kv.create("horovod"))
    forward_backward(net, shard(x, B)[0], shard(y, B)[0], [mx.cpu(0)])
    mine = [p.grad().asnumpy() for p in net.collect_params().values()]
    grads = [hvd.allgather(mx.nd.array(g[None]), name="first.g.%d" % k).asnumpy().sum(axis=0)
             for k, g in enumerate(mine)]  # numpy sum of every rank's gradient
    trainer.step(B * n)
    params = list(net.collect_params().values())
    want = [w - 0.1 * p.lr_mult * g / (B * n) for w, g, p in zip(w0, grads, params)]
    assert_close(param_arrays(net), want, 0.1, "first step")
    assert_same_on_all_ranks(param_arrays(net), "first step")


def allreduce_grads():
    # After allreduce_grads(), every gradient is the sum over ranks: the gradient of the
    # summed loss over the concatenated batch, as a local kvstore leaves it.
    n = hvd.size()
    x, y = global_data(1, B, seed=3)
    net = mlp("grads_dist_")
    ref = rank0_copy(net, "grads_ref_")
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            kvstore="horovod")
    trainer._init_kvstore()
    trainer._init_params()  # the broadcast from rank 0, as the first step does
    forward_backward(net, shard(x, B)[0], shard(y, B)[0], [mx.cpu(0)])
    trainer.allreduce_grads()
    forward_backward(ref, x[0], y[0], [mx.cpu(0)])
    got = [p.grad().asnumpy() for p in net.collect_params().values()]
    want = [p.grad().asnumpy() for p in ref.collect_params().values()]
    assert_close(got, want, 1.0, "allreduce_grads (n=%d)" % n)


def stale_on_some_ranks():
    """step(global batch, ignore_stale_grad=True) with a branch used on rank 0 only: every
    rank updates the branch, the others contributing zeros, as one process on the
    concatenated batch (MXNet's Trainer summed the others' stale gradients in and updated
    on rank 0 only: the ranks' weights drifted apart); the parameter stale everywhere is
    skipped everywhere; update() after allreduce_grads() in that case refuses on every
    rank; with every gradient fresh, update(ignore_stale_grad=True) runs."""
    from training_features import Branchy
    n = hvd.size()
    x, y = global_data(3, B, seed=8)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    net, ref = Branchy("kvstale_dist_"), Branchy("kvstale_ref_")
    for m in (net, ref):
        m.initialize(mx.init.Uniform(0.5))
    for k, (p, q) in enumerate(zip(net.collect_params().values(),
                                   ref.collect_params().values())):
        p.set_data(hvd.broadcast(p.data(), root_rank=0, name="kvstale.start.%d" % k))
        q.set_data(p.data())
    unused0 = net.unused.weight.data().asnumpy()
    trainer = gluon.Trainer(net.collect_params(), optimizer("sgd"), kvstore="horovod")
    ref_trainer = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    for s in range(2):
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(shard(x, B)[s]), hvd.rank() == 0),
                           mx.nd.array(shard(y, B)[s]))
        loss.backward()
        trainer.step(B * n, ignore_stale_grad=True)
        with autograd.record():  # rank 0's rows use the branch, the others' do not
            parts = [loss_fn(ref(mx.nd.array(x[s, k * B:(k + 1) * B]), k == 0),
                             mx.nd.array(y[s, k * B:(k + 1) * B])) for k in range(n)]
            ref_loss = mx.nd.concat(*parts, dim=0)
        ref_loss.backward()
        ref_trainer.step(B * n, ignore_stale_grad=True)
    got = param_arrays(net)
    assert_close(got, param_arrays(ref), 0.1, "kvstore, stale on some ranks")
    assert_same_on_all_ranks(got, "kvstore stale on some ranks")
    np.testing.assert_array_equal(net.unused.weight.data().asnumpy(), unused0)
    with autograd.record():
        loss = loss_fn(net(mx.nd.array(shard(x, B)[2]), hvd.rank() == 0),
                       mx.nd.array(shard(y, B)[2]))
    loss.backward()
    trainer.allreduce_grads()
    try:
        trainer.update(B * n, ignore_stale_grad=True)
        raise AssertionError("update() after a mixed-freshness reduction was accepted")
    except ValueError as e:
        assert "kvstale_dist_dense1_weight" in str(e) and "step(" in str(e), str(e)
    with autograd.record():
        loss = loss_fn(net(mx.nd.array(shard(x, B)[2]), True), mx.nd.array(shard(y, B)[2]))
    loss.backward()
    trainer.allreduce_grads()
    trainer.update(B * n, ignore_stale_grad=True)
    assert_same_on_all_ranks(param_arrays(net), "kvstore stale, update")


def refused():
    # What MXNet does not allow with a kvstore that has no optimizer: an error, never a
    # silent local-only run.
    net = mlp("upd_")
    trainer = gluon.Trainer(net.collect_params(), "sgd", kvstore="horovod",
                            update_on_kvstore=True)
    try:
        trainer._init_kvstore()
        raise AssertionError("update_on_kvstore=True accepted")
    except ValueError as e:
        assert "update_on_kvstore=False" in str(e), e

    # Sparse gradients: MXNet refuses any custom kvstore there, naming no parameter and
    # speaking of "multi-device training"; the error names the parameter and what to use.
    for store in ("horovod", mx.kv.create("horovod")):
        emb = gluon.nn.Embedding(10, 4, sparse_grad=True, prefix="sparse_emb_")
        emb.initialize()
        trainer = gluon.Trainer(emb.collect_params(), "sgd", kvstore=store)
        with autograd.record():
            loss = emb(mx.nd.array([1, 2])).sum()
        loss.backward()
        try:
            trainer.step(2)
            raise AssertionError("sparse gradients accepted")
        except ValueError as e:
            assert "parameter 'sparse_emb_weight' has a row_sparse gradient" in str(e), e
            assert "hvd.DistributedTrainer" in str(e), e

    # Module: kvstore='horovod' stops at init_optimizer, naming the way that works.
    data = mx.sym.Variable("data")
    sym = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(data, num_hidden=3, name="fc"),
                               name="softmax")
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"])
    mod.bind(data_shapes=[("data", (4, 5))], label_shapes=[("softmax_label", (4,))])
    mod.init_params()
    try:
        mod.init_optimizer(kvstore="horovod")
        raise AssertionError("Module accepted kvstore='horovod'")
    except NotImplementedError as e:
        assert "DistributedOptimizer" in str(e) and "kvstore=None" in str(e), e
    # No collective above: keep a rank that is done from ending the job (its exit shuts
    # mxhorovod down on every rank) while a peer still creates kvstores here.
    hvd.allreduce(mx.nd.ones((1,)), name="refused.done").wait_to_read()


def save_states_on_rank0_first():
    # Checkpoints on rank 0 only (README), the first before any step: MXNet's save_states
    # initialized the kvstore there, i.e. broadcast every parameter from rank 0 alone, and
    # the parameters' next read on rank 0 (save_parameters) waited for the other ranks,
    # which waited for rank 0 in their first step: a hang. Now nothing is sent; the first
    # step broadcasts on every rank as before, and the file loads on every rank.
    n = hvd.size()
    x, y = global_data(STEPS, B, seed=5)
    net = same_start("ckpt")
    ref = rank0_copy(net, "ckpt_ref_")
    trainer = gluon.Trainer(net.collect_params(), optimizer("adam"), kvstore="horovod")
    ref_trainer = gluon.Trainer(ref.collect_params(), optimizer("adam"), kvstore=None)
    fname = "/tmp/mxhorovod_kv_ckpt_%d.states" % os.getpid()
    fname = hvd.broadcast_object(fname, root_rank=0, name="ckpt.fname")
    if hvd.rank() == 0:  # an epoch-0 checkpoint
        trainer.save_states(fname)  # before the first step: no collective
        net.save_parameters(fname + ".params")  # reads the parameters (waited for them)
        os.remove(fname + ".params")
    for s in range(STEPS):
        forward_backward(net, shard(x, B)[s], shard(y, B)[s], [mx.cpu(0)])
        trainer.step(B * n)
        forward_backward(ref, x[s], y[s], [mx.cpu(0)])
        ref_trainer.step(B * n)
        if hvd.rank() == 0 and s == 0:
            trainer.save_states(fname)  # after it: MXNet's own code (nothing to initialize)
    assert_close(param_arrays(net), param_arrays(ref), LR["adam"], "ckpt")
    hvd.allreduce(mx.nd.ones((1,)), name="ckpt.saved").wait_to_read()
    trainer.load_states(fname)  # rank 0's states after one step, on every rank
    assert trainer._optimizer.num_update == 1, trainer._optimizer.num_update
    assert_same_on_all_ranks(param_arrays(net), "ckpt")
    hvd.allreduce(mx.nd.ones((1,)), name="ckpt.loaded").wait_to_read()
    if hvd.rank() == 0:
        os.remove(fname)


SCENARIOS = {"instance": instance, "string": string, "devices": devices,
             "per_rank_batch": per_rank_batch, "first_step_broadcast": first_step_broadcast,
             "allreduce_grads": allreduce_grads, "stale_on_some_ranks": stale_on_some_ranks,
             "refused": refused, "save_states_on_rank0_first": save_states_on_rank0_first}

if __name__ == "__main__":
    run_scenarios(SCENARIOS, list(SCENARIOS))
