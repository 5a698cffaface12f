"""DistributedTrainer details (issue 3, item 2), each against a one-process reference.

Usage: train_features.py [scenario ...]     (default: all)
"""
import warnings

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd
from training_common import (assert_close, assert_same_on_all_ranks, copy_params, global_data, run_scenarios,
                          mlp, optimizer, param_arrays, shard, IN)

B = 4


def forward_backward(net, loss_fn, xb, yb, mean=False):
    with autograd.record():
        loss = loss_fn(net(mx.nd.array(xb)), mx.nd.array(yb))
        if mean:
            loss = loss.mean()
    loss.backward()


def pair(tag):
    net = mlp(tag + "_dist_")
    hvd.broadcast_parameters(net.collect_params())
    ref = mlp(tag + "_ref_")
    copy_params(net, ref)
    return net, ref


def grad_req_add():
    """Two backward passes accumulate, then one step == one process, one pass on all."""
    x, y = global_data(2, 2 * B, seed=3)
    net, ref = pair("add")
    net.collect_params().setattr("grad_req", "add")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"))
    ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    for s in range(2):
        xs, ys = shard(x, 2 * B)[s], shard(y, 2 * B)[s]
        forward_backward(net, loss_fn, xs[:B], ys[:B])
        forward_backward(net, loss_fn, xs[B:], ys[B:])
        tr.step(2 * B)
        net.collect_params().zero_grad()
        forward_backward(ref, loss_fn, x[s], y[s])
        ref_tr.step(x.shape[1])
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "grad_req_add")


def clip_between_allreduce_and_update():
    """allreduce_grads(); clip_global_norm; update(): the mean gradient is what is clipped."""
    x, y = global_data(2, B, seed=4)
    net, ref = pair("clip")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"))
    ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    for s in range(2):
        forward_backward(net, loss_fn, shard(x, B)[s], shard(y, B)[s], mean=True)
        tr.allreduce_grads()
        forward_backward(ref, loss_fn, x[s], y[s], mean=True)
        grads = [p.grad() for p in net.collect_params().values()]
        ref_grads = [p.grad() for p in ref.collect_params().values()]
        assert_close([g.asnumpy() for g in grads], [g.asnumpy() for g in ref_grads], 1.0,
                     "mean gradient after allreduce_grads")
        norm = gluon.utils.clip_global_norm(grads, 0.05)
        ref_norm = gluon.utils.clip_global_norm(ref_grads, 0.05)
        assert abs(norm - ref_norm) <= 1e-4 * ref_norm, (norm, ref_norm)
        assert ref_norm > 0.05, "the test must actually clip"
        tr.update(1)
        ref_tr.update(1)
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "clip")
    # A per-sample loss and update(batch_size): one process clips the sum over the whole
    # batch, size() times the mean held here, so the README's rule is the threshold divided
    # by size(): then both clip the same direction by the same factor.
    net, ref = pair("clipsum")
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"))
    ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    for s in range(2):
        forward_backward(net, loss_fn, shard(x, B)[s], shard(y, B)[s])
        tr.allreduce_grads()
        forward_backward(ref, loss_fn, x[s], y[s])
        grads = [p.grad() for p in net.collect_params().values()]
        ref_grads = [p.grad() for p in ref.collect_params().values()]
        norm = gluon.utils.clip_global_norm(grads, 0.5 / hvd.size())
        ref_norm = gluon.utils.clip_global_norm(ref_grads, 0.5)
        assert abs(norm * hvd.size() - ref_norm) <= 1e-4 * ref_norm, (norm, ref_norm)
        assert ref_norm > 0.5, "the test must actually clip"
        tr.update(B)
        ref_tr.update(x.shape[1])
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "clip with a per-sample loss")
    # A plain gluon.Trainer with DistributedOptimizer reduces in update(), as Horovod's:
    # allreduce_grads() leaves this rank's own gradient (what the README says; clipping
    # there clips it), and update() still trains as one process.
    net, ref = pair("clipopt")
    own = mlp("clipopt_own_")
    tr = gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(optimizer("sgd")),
                       kvstore=None)
    ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    for s in range(2):
        copy_params(net, own)
        forward_backward(net, loss_fn, shard(x, B)[s], shard(y, B)[s], mean=True)
        forward_backward(own, loss_fn, shard(x, B)[s], shard(y, B)[s], mean=True)
        tr.allreduce_grads()
        assert_close([p.grad().asnumpy() for p in net.collect_params().values()],
                     [p.grad().asnumpy() for p in own.collect_params().values()], 1.0,
                     "own gradient after allreduce_grads with DistributedOptimizer")
        tr.update(1)
        forward_backward(ref, loss_fn, x[s], y[s], mean=True)
        ref_tr.update(1)
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "DistributedOptimizer update")


def two_trainers_gan():
    """Two trainers stepping alternately, each with its own names (default prefixes)."""
    x, y = global_data(2, B, seed=5)
    gen, gen_ref = pair("gen")
    disc, disc_ref = pair("disc")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trs = [hvd.DistributedTrainer(gen.collect_params(), optimizer("sgd")),
           hvd.DistributedTrainer(disc.collect_params(), optimizer("adam"))]
    refs = [gluon.Trainer(gen_ref.collect_params(), optimizer("sgd"), kvstore=None),
            gluon.Trainer(disc_ref.collect_params(), optimizer("adam"), kvstore=None)]
    for s in range(2):
        for k, (m, mr) in enumerate(((gen, gen_ref), (disc, disc_ref))):
            forward_backward(m, loss_fn, shard(x, B)[s], shard(y, B)[s])
            # Push both trainers' allreduces before either is read: names must differ.
            trs[k].step(B)
            forward_backward(mr, loss_fn, x[s], y[s])
            refs[k].step(x.shape[1])
    assert trs[0]._prefix != trs[1]._prefix  # numbered at their first reduction
    assert_close(param_arrays(gen), param_arrays(gen_ref), 0.1, "gan generator")
    assert_close(param_arrays(disc), param_arrays(disc_ref), 0.01, "gan discriminator")


def unwrap_and_type_errors():
    net = mlp("unwrap_")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tr = hvd.DistributedTrainer(net.collect_params(),
                                    hvd.DistributedOptimizer(optimizer("sgd")))
    assert any("unwrapped" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert not isinstance(tr._optimizer, hvd.DistributedOptimizer)
    try:
        hvd.DistributedTrainer(net.collect_params(), tr)
    except TypeError as e:
        assert "Trainer" in str(e), e
    else:
        raise AssertionError("a Trainer as optimizer must raise TypeError")


def insertion_order_and_null():
    """Dict insertion order differs by rank; a grad_req='null' parameter is left alone."""
    x, y = global_data(2, B, seed=6)
    net, ref = pair("order")
    items = list(net.collect_params().items())
    if hvd.rank() % 2:
        items.reverse()
    frozen = net.collect_params()["order_dist_dense0_bias"]
    frozen.grad_req = "null"
    ref.collect_params()["order_ref_dense0_bias"].grad_req = "null"
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    tr = hvd.DistributedTrainer(dict(items), optimizer("sgd"))
    ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    before = frozen.data().asnumpy()
    for s in range(2):
        forward_backward(net, loss_fn, shard(x, B)[s], shard(y, B)[s])
        tr.step(B)
        forward_backward(ref, loss_fn, x[s], y[s])
        ref_tr.step(x.shape[1])
    np.testing.assert_array_equal(frozen.data().asnumpy(), before)
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "insertion order")


def embedding_net(prefix, vocab):
    net = gluon.nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(gluon.nn.Embedding(vocab, 4, sparse_grad=True))
        net.add(gluon.nn.Flatten())
        net.add(gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Uniform(0.5 + 0.1 * hvd.rank()))
    return net


def sparse_tokens(steps, vocab_per_rank=10, seed=7):
    """(x, y): x (steps, size*B, 2) token ids, rank r's rows drawing from its own range
    r*vocab_per_rank .. (r+1)*vocab_per_rank - 1; y (steps, size*B) labels in 0..2."""
    rng = np.random.RandomState(seed)
    n = hvd.size()
    x = np.stack([np.stack([rng.randint(vocab_per_rank * r, vocab_per_rank * (r + 1),
                                        size=(B, 2)) for r in range(n)])
                  for _ in range(steps)]).reshape(steps, n * B, 2).astype(np.float32)
    y = rng.randint(0, 3, size=(steps, n * B)).astype(np.float32)
    return x, y


def row_sparse_training(tag, make_trainer):
    """Embedding(sparse_grad=True) trained 2 steps by ``make_trainer(params, optimizer)``
    against one process on the concatenated batch. Rank r uses tokens from its own range
    (r*10 .. r*10+9), so some rows are touched by one rank only; the rows nobody touches
    (from 10*size on) must keep their values."""
    vocab = 50
    x, y = sparse_tokens(2)
    net = embedding_net(tag + "_dist_", vocab)
    hvd.broadcast_parameters(net.collect_params())
    ref = embedding_net(tag + "_ref_", vocab)
    copy_params(net, ref)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    make = lambda: mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=1e-3)
    tr = make_trainer(net.collect_params(), make())
    ref_tr = gluon.Trainer(ref.collect_params(), make(), kvstore=None)
    before = net[0].weight.data().asnumpy()
    for s in range(2):
        forward_backward(net, loss_fn, shard(x, B)[s], shard(y, B)[s])
        assert net[0].weight.grad().stype == "row_sparse"
        tr.step(B)
        forward_backward(ref, loss_fn, x[s], y[s])
        ref_tr.step(x.shape[1])
    n = hvd.size()
    np.testing.assert_array_equal(net[0].weight.data().asnumpy()[10 * n:], before[10 * n:])
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "row_sparse " + tag)
    assert_same_on_all_ranks(param_arrays(net), "row_sparse " + tag)


def row_sparse_embedding():
    """Embedding(sparse_grad=True) through DistributedTrainer: rows touched by any rank are
    updated, others are not."""
    row_sparse_training("emb", hvd.DistributedTrainer)


def row_sparse_optimizer_gluon():
    """DistributedOptimizer in a plain gluon.Trainer with Embedding(sparse_grad=True): the
    row_sparse gradient is averaged (it raised 'row_sparse NDArrays are not supported'
    naming 'DistributedOptimizer.0.2', not the parameter); rows nobody touched stay."""
    row_sparse_training("embo", lambda params, opt: gluon.Trainer(
        params, hvd.DistributedOptimizer(opt), kvstore=None))


def row_sparse_optimizer_module(weight_stype="default"):
    """Module.fit with DistributedOptimizer and Embedding(sparse_grad=True) (a row_sparse
    gradient; the weight dense, or row_sparse as well): equals one process on the
    concatenated batch."""
    x, y = sparse_tokens(3, vocab_per_rank=5, seed=9)
    data = mx.sym.Variable("data")
    weight = mx.sym.Variable("emb_weight", stype=weight_stype)
    emb = mx.sym.Embedding(data, weight=weight, input_dim=20, output_dim=4, sparse_grad=True,
                           name="emb")
    out = mx.sym.FullyConnected(mx.sym.flatten(emb), num_hidden=3, name="fc")
    sym = mx.sym.SoftmaxOutput(out, name="softmax")
    mods = []
    for batch in (B, B * hvd.size()):
        mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"])
        mod.bind(data_shapes=[("data", (batch, 2))], label_shapes=[("softmax_label", (batch,))])
        mx.random.seed(20 + hvd.rank())
        mod.init_params(mx.init.Uniform(0.5))
        mods.append(mod)
    dist, ref = mods
    arg, aux = dist.get_params()
    assert arg["emb_weight"].stype == weight_stype
    hvd.broadcast_parameters(arg)
    if weight_stype == "row_sparse":  # refused before ("only dense arrays")
        assert arg["emb_weight"].stype == "row_sparse"
        assert_same_on_all_ranks([arg["emb_weight"].asnumpy()], "row_sparse weight broadcast")
    dist.set_params(arg, aux)
    ref.set_params(arg, aux)
    before = arg["emb_weight"].asnumpy()
    for mod, xd, yd, batch, wrap in ((dist, shard(x, B), shard(y, B), B, True),
                                     (ref, x, y, B * hvd.size(), False)):
        it = mx.io.NDArrayIter(xd.reshape(-1, 2), yd.reshape(-1), batch_size=batch,
                               label_name="softmax_label")
        opt = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, rescale_grad=1.0 / batch)
        mod.fit(it, num_epoch=1, optimizer=hvd.DistributedOptimizer(opt) if wrap else opt,
                kvstore=None)
    got = [v.asnumpy() for _, v in sorted(dist.get_params()[0].items())]
    want = [v.asnumpy() for _, v in sorted(ref.get_params()[0].items())]
    n = hvd.size()
    np.testing.assert_array_equal(dist.get_params()[0]["emb_weight"].asnumpy()[5 * n:],
                                  before[5 * n:])
    assert_close(got, want, 0.1, "row_sparse, Module")
    assert_same_on_all_ranks(got, "row_sparse_module")


def row_sparse_weight_module():
    """row_sparse_optimizer_module with a row_sparse weight (mx.sym.Variable(...,
    stype='row_sparse')): broadcast_parameters of Module's arg_params sends it through its
    dense form."""
    row_sparse_optimizer_module("row_sparse")


class _HorovodStyleFP16(object):
    """A user's compressor with Horovod's interface only (compress and decompress, no
    decompress_into): the trainer assigns what decompress returns."""
    calls = 0

    @staticmethod
    def compress(tensor):
        _HorovodStyleFP16.calls += 1
        return tensor.astype("float16"), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.astype(ctx)


class _CountingFP16(hvd.Compression.fp16):
    """A subclass of Compression.fp16 overriding compress and decompress: the trainer must
    call them (not the inherited one-pass path)."""
    calls = [0, 0]

    @staticmethod
    def compress(tensor):
        _CountingFP16.calls[0] += 1
        return hvd.Compression.fp16.compress(tensor)

    @staticmethod
    def decompress(tensor, ctx):
        _CountingFP16.calls[1] += 1
        return hvd.Compression.fp16.decompress(tensor, ctx)


def fp16_compression():
    """Compression.fp16 (its cast straight into the gradient), a compressor with Horovod's
    interface only, and a subclass of Compression.fp16 overriding both methods: same
    training up to float16 rounding of the gradients."""
    x, y = global_data(2, B, seed=8)
    for tag, compression in (("fp16", hvd.Compression.fp16), ("hfp16", _HorovodStyleFP16),
                             ("sfp16", _CountingFP16)):
        net, ref = pair(tag)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"),
                                    compression=compression)
        ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
        for s in range(2):
            forward_backward(net, loss_fn, shard(x, B)[s], shard(y, B)[s])
            tr.step(B)
            for p in net.collect_params().values():
                assert p.grad().dtype == np.float32
            forward_backward(ref, loss_fn, x[s], y[s])
            ref_tr.step(x.shape[1])
        got, want = param_arrays(net), param_arrays(ref)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-3, atol=2e-3 * 0.1)
        assert_same_on_all_ranks(got, tag)
    assert _HorovodStyleFP16.calls >= 2
    assert min(_CountingFP16.calls) >= 2, _CountingFP16.calls


def optimizer_on_own_device():
    """DistributedOptimizer in a gluon.Trainer with every rank on its own device,
    mx.cpu(local_rank), as Horovod's examples do (the Updater passes the device id, which
    differs per rank: it must not enter the collective's name; that hung)."""
    x, y = global_data(2, B, seed=7)
    net, ref = pair("own_device")
    net.collect_params().reset_ctx(mx.cpu(hvd.local_rank()))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    tr = gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(optimizer("sgd")),
                       kvstore=None)
    ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    for s in range(2):
        with autograd.record():
            xb = mx.nd.array(shard(x, B)[s], ctx=mx.cpu(hvd.local_rank()))
            yb = mx.nd.array(shard(y, B)[s], ctx=mx.cpu(hvd.local_rank()))
            loss = loss_fn(net(xb), yb)
        loss.backward()
        tr.step(B)
        forward_backward(ref, loss_fn, x[s], y[s])
        ref_tr.step(x.shape[1])
    assert_close(param_arrays(net), param_arrays(ref), 0.1, "optimizer on mx.cpu(local_rank)")


class Branchy(gluon.Block):
    """main(x), plus branch(x) when ``use_branch``: a parameter used on some ranks only."""

    def __init__(self, prefix):
        super(Branchy, self).__init__(prefix=prefix)
        with self.name_scope():
            self.main = gluon.nn.Dense(3, in_units=IN)
            self.branch = gluon.nn.Dense(3, in_units=IN)
            self.unused = gluon.nn.Dense(3, in_units=IN)  # stale everywhere

    def forward(self, x, use_branch):
        y = self.main(x)
        return y + self.branch(x) if use_branch else y


def branchy_pair(tag):
    """(net, ref): Branchy nets '<tag>dist_' and '<tag>ref_', both holding rank 0's weights."""
    net, ref = Branchy(tag + "dist_"), Branchy(tag + "ref_")
    for m in (net, ref):
        m.initialize(mx.init.Uniform(0.5))
    hvd.broadcast_parameters(net.collect_params())
    for pd, ps in zip(ref.collect_params().values(), net.collect_params().values()):
        pd.set_data(ps.data())
    return net, ref


def branchy_reference_step(ref, ref_tr, loss_fn, x, y, s):
    """Step ``s`` of one process on the concatenated batch: rank 0's rows use the branch."""
    with autograd.record():
        parts = [loss_fn(ref(mx.nd.array(x[s, k * B:(k + 1) * B]), k == 0),
                         mx.nd.array(y[s, k * B:(k + 1) * B])) for k in range(hvd.size())]
        ref_loss = mx.nd.concat(*parts, dim=0)
    ref_loss.backward()
    ref_tr.step(x.shape[1], ignore_stale_grad=True)


def stale_on_some_ranks():
    """step(ignore_stale_grad=True) with a branch used on rank 0 only: every rank updates
    the branch, the others contributing zeros (one process on the concatenated batch);
    the parameter stale everywhere is skipped everywhere. (Averaging the stale gradients
    in and updating on rank 0 only drifted the ranks apart.) update() after
    allreduce_grads() in that case refuses on every rank."""
    x, y = global_data(3, B, seed=8)
    net, ref = branchy_pair("stale_")
    unused0 = net.unused.weight.data().asnumpy()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"))
    ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    for s in range(2):
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(shard(x, B)[s]), hvd.rank() == 0),
                           mx.nd.array(shard(y, B)[s]))
        loss.backward()
        tr.step(B, ignore_stale_grad=True)
        branchy_reference_step(ref, ref_tr, loss_fn, x, y, s)
    got = [p.data().asnumpy() for p in net.collect_params().values()]
    assert_close(got, [p.data().asnumpy() for p in ref.collect_params().values()], 0.1,
                 "stale on some ranks")
    assert_same_on_all_ranks(got, "stale on some ranks")
    np.testing.assert_array_equal(net.unused.weight.data().asnumpy(), unused0)
    with autograd.record():
        loss = loss_fn(net(mx.nd.array(shard(x, B)[2]), hvd.rank() == 0),
                       mx.nd.array(shard(y, B)[2]))
    loss.backward()
    tr.allreduce_grads()
    try:
        tr.update(B, ignore_stale_grad=True)
        raise AssertionError("update() after a mixed-freshness reduction was accepted")
    except ValueError as e:
        assert "stale_dist_dense1_weight" in str(e) and "step(" in str(e), str(e)


def stale_on_some_ranks_optimizer():
    """A plain gluon.Trainer with DistributedOptimizer, step(ignore_stale_grad=True) and a
    branch used on rank 0 only: the Trainer calls the optimizer for fresh parameters only,
    so rank 0 alone reduced the branch and waited for the others (stalled). Now the ranks
    agree on freshness first and every rank updates it, as one process on the
    concatenated batch; also through allreduce_grads() + update(ignore_stale_grad=True)
    (the optimizer reduces in update)."""
    x, y = global_data(3, B, seed=9)
    net, ref = branchy_pair("ostale_")
    unused0 = net.unused.weight.data().asnumpy()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    tr = gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(optimizer("sgd")),
                       kvstore=None)
    ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
    for s in range(3):
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(shard(x, B)[s]), hvd.rank() == 0),
                           mx.nd.array(shard(y, B)[s]))
        loss.backward()
        if s < 2:
            tr.step(B, ignore_stale_grad=True)
        else:
            tr.allreduce_grads()
            tr.update(B, ignore_stale_grad=True)
        branchy_reference_step(ref, ref_tr, loss_fn, x, y, s)
    got = [p.data().asnumpy() for p in net.collect_params().values()]
    assert_close(got, [p.data().asnumpy() for p in ref.collect_params().values()], 0.1,
                 "stale on some ranks, DistributedOptimizer")
    assert_same_on_all_ranks(got, "stale on some ranks, DistributedOptimizer")
    np.testing.assert_array_equal(net.unused.weight.data().asnumpy(), unused0)


def amp_overflow_on_one_rank():
    """AMP dynamic loss scaling (amp.init_trainer) with an inf gradient on the last rank
    only, in step 1 of 3: every rank skips that step and halves its loss scale, as one
    process on the concatenated batch. With DistributedOptimizer in a plain gluon.Trainer
    the scaler's check ran before the reduction, on each rank's own gradients: the
    overflowed rank skipped the optimizer and its allreduces, the job stalled (or ran on
    with the ranks a step apart). DistributedTrainer, which reduces first, as well."""
    from mxnet.contrib import amp
    from mxnet.contrib.amp.loss_scaler import LossScaler
    if not amp.amp._amp_initialized:
        # amp.init() would also cast FullyConnected to float16, which MXNet's CPU build
        # lacks: switch on only the loss-scaling half, the part that involves the Trainer.
        amp.amp._amp_initialized = True
        amp.amp._loss_scaler = LossScaler()
    x, y = global_data(3, B, seed=10)
    x[1, -1, 0] = np.inf  # a row of the last rank's shard in step 1
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for kind in ("optimizer", "trainer"):
        net, ref = pair("amp_" + kind)
        if kind == "optimizer":
            tr = gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(optimizer("sgd")),
                               kvstore=None)
        else:
            tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"))
        ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
        amp.init_trainer(tr)
        amp.init_trainer(ref_tr)
        for s in range(3):
            for model, trainer, xb, yb in ((net, tr, shard(x, B)[s], shard(y, B)[s]),
                                           (ref, ref_tr, x[s], y[s])):
                with autograd.record():
                    loss = loss_fn(model(mx.nd.array(xb)), mx.nd.array(yb))
                    with amp.scale_loss(loss, trainer) as scaled:
                        autograd.backward(scaled)
                trainer.step(xb.shape[0])
            assert tr._amp_loss_scaler._next_loss_scale == \
                ref_tr._amp_loss_scaler._next_loss_scale, (kind, s)
        assert ref_tr._amp_loss_scaler._next_loss_scale == 2.0 ** 15  # halved once
        assert_close(param_arrays(net), param_arrays(ref), 0.1, "amp overflow, " + kind)
        assert_same_on_all_ranks(param_arrays(net), "amp overflow " + kind)


def different_parameters_on_some_ranks():
    """The last rank's trainer reduces other parameters (a layer frozen there only; one more
    parameter there; a parameter of another shape there; two parameters of one shape in the
    other order there): a ValueError on every rank at the
    first step, naming the parameter and the rank, for DistributedTrainer (with and without
    bucket views), a gluon.Trainer with DistributedOptimizer and one over kvstore 'horovod'.
    Before, every rank waited for the names the others never submitted (a hang with stall
    warnings; bucket views alone raised). Then the same layer frozen on every rank between
    two steps: checked again, and the training equals one process."""
    last = hvd.size() - 1
    kinds = {
        "trainer": lambda ps: hvd.DistributedTrainer(ps, optimizer("sgd")),
        "buckets": lambda ps: hvd.DistributedTrainer(ps, optimizer("sgd"),
                                                     gradient_as_bucket_view=True),
        "optimizer": lambda ps: gluon.Trainer(ps, hvd.DistributedOptimizer(optimizer("sgd")),
                                              kvstore=None),
        "kvstore": lambda ps: gluon.Trainer(ps, optimizer("sgd"), kvstore="horovod"),
    }
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = global_data(2, B, seed=12)
    for kind, make in sorted(kinds.items()):
        for case in ("frozen", "extra", "shape", "order"):
            tag = "lay_%s_%s" % (kind, case)
            net = mlp(tag + "_")
            params = list(net.collect_params().values())
            extra = gluon.Parameter(tag + "_extra", shape=(4 if hvd.rank() == last else 3,))
            extra.initialize()
            if case == "frozen" and hvd.rank() == last:
                net[0].bias.grad_req = "null"
            if case == "shape" or (case == "extra" and hvd.rank() == last):
                params.append(extra)
            # Two parameters of one shape, listed in the other order on the last rank: their
            # gradients were averaged with each other's, silently (as in Horovod).
            pa, pb = gluon.Parameter(tag + "_a", shape=(3,)), gluon.Parameter(tag + "_b", shape=(3,))
            pa.initialize()
            pb.initialize()
            if case == "order":
                params += [pb, pa] if hvd.rank() == last else [pa, pb]
            tr = make(params)
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(shard(x, B)[0])), mx.nd.array(shard(y, B)[0]))
                loss = loss + extra.data().sum() + pa.data().sum() + 2 * pb.data().sum()
            loss.backward()
            try:
                tr.step(B)
            except ValueError as e:
                msg = str(e)
                want = {"frozen": tag + "_dense0_bias", "extra": "parameters, rank 0",
                        "shape": tag + "_extra",
                        "order": "the same parameters in another order"}[case]
                assert "differ between ranks" in msg and "rank %d" % last in msg and \
                    want in msg, (kind, case, msg)
                if case == "order":
                    assert "'%s_a' on rank 0, '%s_b' on rank %d" % (tag, tag, last) in msg, msg
            else:
                raise AssertionError("%s %s: no error on rank %d" % (kind, case, hvd.rank()))
            # The process stays usable.
            assert hvd.allreduce(mx.nd.ones((2,)), name=tag + ".after").asnumpy().tolist() == \
                [1, 1]
        # Frozen on every rank between two steps: checked again, equal to one process.
        net, ref = pair("lay_%s_all" % kind)
        tr = make(net.collect_params())
        ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
        batch = B * (hvd.size() if kind == "kvstore" else 1)  # the kvstore sums
        for s in range(2):
            if s == 1:
                # A bias, not a weight: MXNet 1.9.1's MKLDNN FullyConnected backward leaves
                # the bias gradient unwritten when the weight needs none (one process too).
                net[0].bias.grad_req = ref[0].bias.grad_req = "null"
            forward_backward(net, loss_fn, shard(x, B)[s], shard(y, B)[s])
            tr.step(batch)
            forward_backward(ref, loss_fn, x[s], y[s])
            ref_tr.step(x.shape[1])
        assert_close(param_arrays(net), param_arrays(ref), 0.1, "frozen everywhere, " + kind)


def module_different_parameters_on_some_ranks():
    """Module.fit with DistributedOptimizer, fc1_weight fixed (fixed_param_names) on the last
    rank only: a ValueError on every rank at the first update naming it (before, every rank
    waited in the optimizer's allreduces). Then a BucketingModule whose ranks are in
    different buckets at each step (its modules share the optimizer: checked once, no rank
    waits alone): the weights equal one process's sum of the ranks' gradients."""
    last = hvd.size() - 1
    x, y = global_data(1, B, seed=13)
    data = mx.sym.Variable("data")
    h = mx.sym.Activation(mx.sym.FullyConnected(data, num_hidden=4, name="fc1"),
                          act_type="tanh")
    sym = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(h, num_hidden=3, name="fc2"),
                               name="softmax")
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"],
                        fixed_param_names=["fc1_weight"] if hvd.rank() == last else None)
    it = mx.io.NDArrayIter(shard(x, B)[0], shard(y, B)[0], batch_size=B,
                           label_name="softmax_label")
    opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1, rescale_grad=1.0 / B))
    try:
        mod.fit(it, num_epoch=1, optimizer=opt, kvstore=None, initializer=mx.init.Uniform(0.5))
    except ValueError as e:
        msg = str(e)
        assert "differ between ranks" in msg and "'fc1_weight'" in msg and \
            "rank %d not reduced" % last in msg, msg
    else:
        raise AssertionError("fixed_param_names on one rank: no error on rank %d" % hvd.rank())
    assert hvd.allreduce(mx.nd.ones((2,)), name="modlay.after").asnumpy().tolist() == [1, 1]

    def sym_gen(length):  # (B, 2 * length) -> sum of the length pairs -> fc
        feats = mx.sym.sum(mx.sym.reshape(mx.sym.Variable("data"), shape=(0, length, 2)),
                           axis=1)
        out = mx.sym.FullyConnected(feats, num_hidden=3, name="bfc")
        return mx.sym.SoftmaxOutput(out, name="softmax"), ("data",), ("softmax_label",)
    lengths = [2, 3, 4]
    bmod = mx.mod.BucketingModule(sym_gen, default_bucket_key=max(lengths))
    bmod.bind(data_shapes=[("data", (B, 2 * max(lengths)))],
              label_shapes=[("softmax_label", (B,))])
    bmod.init_params(mx.init.Constant(0.1))
    bmod.init_optimizer(kvstore=None, optimizer=hvd.DistributedOptimizer(
        mx.optimizer.SGD(learning_rate=0.1, rescale_grad=1.0 / B)))
    labels = mx.nd.array(np.arange(B) % 3)
    grads = []  # every rank's fc gradient at each step, from one process's view
    weight, bias = np.full((3, 2), 0.1), np.zeros((3,))  # Initializer: biases 0
    for s in range(3):
        rank_lengths = [lengths[(s + q) % 3] for q in range(hvd.size())]
        n = rank_lengths[hvd.rank()]
        batch = mx.io.DataBatch([mx.nd.ones((B, 2 * n)) * (s + 1)], [labels], bucket_key=n,
                                provide_data=[mx.io.DataDesc("data", (B, 2 * n))],
                                provide_label=[mx.io.DataDesc("softmax_label", (B,))])
        bmod.forward_backward(batch)
        bmod.update()
        # One process: the mean over ranks of each rank's softmax gradient (per-rank batch).
        gw, gb = np.zeros_like(weight), np.zeros_like(bias)
        for length in rank_lengths:
            feats = np.full((B, 2), float(length * (s + 1)))
            logits = feats @ weight.T + bias
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(B), np.arange(B) % 3] -= 1
            gw += p.T @ feats / B
            gb += p.sum(0) / B
        weight -= 0.1 * gw / hvd.size()
        bias -= 0.1 * gb / hvd.size()
    arg = bmod.get_params()[0]
    np.testing.assert_allclose(arg["bfc_weight"].asnumpy(), weight, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(arg["bfc_bias"].asnumpy(), bias, rtol=1e-4, atol=1e-6)


def different_settings_on_some_ranks():
    """A trainer or optimizer made with other settings on the last rank (num_groups,
    gradient_as_bucket_view, gradient_predivide_factor): a ValueError on every rank at the
    first step naming the setting and each rank's value, before anything is reduced.
    Before, num_groups=2 against 0 made grouped allreduces ('<prefix>0:1.0') on some ranks
    and single ones ('<prefix>0') on the others, and bucket views on some ranks waited in
    the buckets' layout exchange: every rank waited forever (stall warnings only); a
    gradient_predivide_factor failed the step half-way, in the allreduces. Then the same
    for Module.fit with DistributedOptimizer(num_groups=...)."""
    last = hvd.size() - 1
    odd = hvd.rank() == last
    kinds = {
        "num_groups": (lambda ps: hvd.DistributedTrainer(ps, optimizer("sgd"),
                                                         num_groups=2 if odd else 0),
                       "num_groups: 0 on rank", "2 on rank %d" % last),
        "buckets": (lambda ps: hvd.DistributedTrainer(ps, optimizer("sgd"),
                                                      gradient_as_bucket_view=odd),
                    "gradient_as_bucket_view: False on rank", "True on rank %d" % last),
        "predivide": (lambda ps: hvd.DistributedTrainer(
            ps, optimizer("sgd"), gradient_predivide_factor=2.0 if odd else 1.0),
            "gradient_predivide_factor: 1.0 on rank", "2.0 on rank %d" % last),
        "optimizer_num_groups": (lambda ps: gluon.Trainer(ps, hvd.DistributedOptimizer(
            optimizer("sgd"), num_groups=1 if odd else 3), kvstore=None),
            "num_groups: 3 on rank", "1 on rank %d" % last),
    }
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = global_data(1, B, seed=14)
    for kind, (make, want, want_last) in sorted(kinds.items()):
        tag = "set_%s" % kind
        net = mlp(tag + "_")
        tr = make(net.collect_params())
        forward_backward(net, loss_fn, shard(x, B)[0], shard(y, B)[0])
        before = param_arrays(net)
        try:
            tr.step(B)
        except ValueError as e:
            msg = str(e)
            assert "different settings" in msg and want in msg and want_last in msg, \
                (kind, msg)
        else:
            raise AssertionError("%s: no error on rank %d" % (kind, hvd.rank()))
        mx.nd.waitall()  # nothing was reduced or updated, no collective left failing
        assert_close(param_arrays(net), before, 0.0, "nothing updated, " + kind)
        assert hvd.allreduce(mx.nd.ones((2,)), name=tag + ".after").asnumpy().tolist() == \
            [1, 1]
    # Module.fit with DistributedOptimizer: the same check before its first update.
    data = mx.sym.Variable("data")
    sym = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(data, num_hidden=3, name="sfc"),
                               name="softmax")
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"])
    it = mx.io.NDArrayIter(shard(x, B)[0], shard(y, B)[0], batch_size=B,
                           label_name="softmax_label")
    opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1, rescale_grad=1.0 / B),
                                   num_groups=2 if odd else 0)
    try:
        mod.fit(it, num_epoch=1, optimizer=opt, kvstore=None, initializer=mx.init.Uniform(0.5))
    except ValueError as e:
        msg = str(e)
        assert "Module with a DistributedOptimizer" in msg and "different settings" in msg \
            and "num_groups: 0 on rank" in msg and "2 on rank %d" % last in msg, msg
    else:
        raise AssertionError("Module, num_groups on one rank: no error on rank %d" % hvd.rank())
    assert hvd.allreduce(mx.nd.ones((2,)), name="setmod.after").asnumpy().tolist() == [1, 1]


def optimizer_on_several_contexts_without_kvstore():
    """DistributedOptimizer with kvstore=None and two contexts per rank (gluon.Trainer,
    Module.fit): a ValueError at the first step naming the contexts. Before, each context's
    gradient was averaged with the same context of the other ranks only, so each context
    trained its own copy and the copies drifted apart without a word. kvstore='device' (the
    contexts summed first) still trains as one process on the concatenated batch."""
    ctxs = [mx.cpu(0), mx.cpu(1)]
    x, y = global_data(2, B, seed=14)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for kvstore in (None, "device"):
        net, ref = pair("ctx_%s" % kvstore)
        net.collect_params().reset_ctx(ctxs)
        tr = gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(optimizer("sgd")),
                           kvstore=kvstore)
        ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
        try:
            for s in range(2):
                xs, ys = shard(x, B)[s], shard(y, B)[s]
                with autograd.record():  # half of this rank's batch on each context
                    losses = [loss_fn(net(mx.nd.array(xs[k::2], ctx=c)),
                                      mx.nd.array(ys[k::2], ctx=c))
                              for k, c in enumerate(ctxs)]
                autograd.backward(losses)
                tr.step(B)
                forward_backward(ref, loss_fn, x[s], y[s])
                ref_tr.step(x.shape[1])
        except ValueError as e:
            assert kvstore is None and "kvstore=None on 2 contexts" in str(e), (kvstore, e)
        else:
            assert kvstore is not None, "2 contexts and kvstore=None: no error"
            for c in ctxs:
                assert_close([p.data(c).asnumpy() for p in net.collect_params().values()],
                             param_arrays(ref), 0.1, "kvstore='device' on %s" % c)
    data = mx.sym.Variable("data")
    sym = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(data, num_hidden=3, name="cfc"),
                               name="softmax")
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"], context=ctxs)
    it = mx.io.NDArrayIter(shard(x, B)[0], shard(y, B)[0], batch_size=B,
                           label_name="softmax_label")
    try:
        mod.fit(it, num_epoch=1, kvstore=None,
                optimizer=hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1)))
    except ValueError as e:
        assert "Module with a DistributedOptimizer and kvstore=None on 2 contexts" in str(e), e
    else:
        raise AssertionError("Module on 2 contexts with kvstore=None: no error")
    assert hvd.allreduce(mx.nd.ones((2,)), name="ctx.after").asnumpy().tolist() == [1, 1]


def parameters_moved_to_more_contexts_after_the_trainer():
    """reset_ctx to two contexts per rank after the trainer was made (DistributedTrainer,
    with and without bucket views; gluon.Trainer with DistributedOptimizer, or over kvstore
    'horovod'): a ValueError on every rank at the step naming the parameters, also when
    only the last rank moved them. Before, the trainer reduced and updated the first
    context's copy only: the second copy's gradient was left out and its weights never
    changed, without a word (MXNet's own Trainer does the same). Moved back to one
    context, the same trainer trains as one process on the concatenated batch."""
    ctxs = [mx.cpu(0), mx.cpu(1)]
    x, y = global_data(1, B, seed=15)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for kind in ("trainer", "buckets", "optimizer", "kvstore"):
        for movers in ("all", "last"):
            net, ref = pair("moved_%s_%s" % (kind, movers))
            if kind == "trainer":
                tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"))
            elif kind == "buckets":
                tr = hvd.DistributedTrainer(net.collect_params(), optimizer("sgd"),
                                            gradient_as_bucket_view=True)
            elif kind == "optimizer":
                tr = gluon.Trainer(net.collect_params(),
                                   hvd.DistributedOptimizer(optimizer("sgd")), kvstore=None)
            else:
                tr = gluon.Trainer(net.collect_params(), optimizer("sgd"), kvstore="horovod")
            batch = B if kind != "kvstore" else x.shape[1]  # the kvstore sums: global batch
            if movers == "all" or hvd.rank() == hvd.size() - 1:
                net.collect_params().reset_ctx(ctxs)
            moved = net.collect_params().list_ctx()
            xs, ys = shard(x, B)[0], shard(y, B)[0]
            with autograd.record():  # half of this rank's batch on each context
                losses = [loss_fn(net(mx.nd.array(xs[k::len(moved)], ctx=c)),
                                  mx.nd.array(ys[k::len(moved)], ctx=c))
                          for k, c in enumerate(moved)]
            autograd.backward(losses)
            try:
                tr.step(batch)
            except ValueError as e:
                msg = str(e)
                assert "on 2 contexts" in msg, (kind, movers, msg)
                assert "%s_%s_dist_dense0_weight" % (kind, movers) in msg, (kind, movers, msg)
            else:
                raise AssertionError("%s, moved on %s ranks: no error" % (kind, movers))
            net.collect_params().reset_ctx(mx.cpu(0))
            forward_backward(net, loss_fn, xs, ys)
            tr.step(batch)
            forward_backward(ref, loss_fn, x[0], y[0])
            ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
            ref_tr.step(x.shape[1])
            assert_close(param_arrays(net), param_arrays(ref), 0.1,
                         "moved back, %s %s" % (kind, movers))
            assert_same_on_all_ranks(param_arrays(net), "moved_%s_%s" % (kind, movers))


def update_without_allreduce_grads():
    """update() with no allreduce_grads() before it (a single-process habit, where it does
    nothing): the gradients are reduced in update(), once per update (an allreduce_grads()
    before it is not doubled: kvstore 'horovod' sums, so a second reduction would multiply
    by size()), and a UserWarning says so once per trainer, on every rank. (It updated each
    rank with its own gradient: the ranks drifted apart without a word, as in Horovod.)
    allreduce_grads() then step() over kvstore 'horovod' summed twice: step() now updates
    without reducing again and warns once. An update() that raised (here at its batch-size
    check) leaves no gradient counted as reduced: the next update() reduces."""
    x, y = global_data(7, B, seed=11)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    kinds = {
        "trainer": (lambda ps: hvd.DistributedTrainer(ps, optimizer("sgd")), B),
        "bucket views": (lambda ps: hvd.DistributedTrainer(ps, optimizer("sgd"),
                                                           gradient_as_bucket_view=True), B),
        "kvstore": (lambda ps: gluon.Trainer(ps, optimizer("sgd"), kvstore="horovod"),
                    hvd.size() * B),
        "optimizer": (lambda ps: gluon.Trainer(ps, hvd.DistributedOptimizer(optimizer("sgd")),
                                               kvstore=None), B)}
    for kind, (make, batch) in kinds.items():
        net, ref = pair("unreduced_" + kind.replace(" ", "_"))
        tr = make(net.collect_params())
        ref_tr = gluon.Trainer(ref.collect_params(), optimizer("sgd"), kvstore=None)
        several = hvd.size() > 1 and kind != "optimizer"  # the optimizer reduces in update()
        # (allreduce_grads() first?, how the step ends, warnings so far: update() without
        # allreduce_grads(), step() after it)
        plan = [(True, "update", 0, 0), (False, "update", 1, 0), (False, "update", 1, 0),
                (False, "step", 1, 0), (True, "step", 1, 1 if kind == "kvstore" else 0),
                (True, "fails", 1, 1 if kind == "kvstore" else 0),
                (False, "update", 1, 1 if kind == "kvstore" else 0)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for s, (reduce_first, how, unreduced, reduced_step) in enumerate(plan):
                forward_backward(net, loss_fn, shard(x, B)[s], shard(y, B)[s])
                if reduce_first:
                    tr.allreduce_grads()
                if how == "fails":
                    try:
                        tr.update(None)
                        raise AssertionError("update(None) did not raise")
                    except TypeError:
                        pass
                else:
                    getattr(tr, how)(batch)
                    forward_backward(ref, loss_fn, x[s], y[s])
                    ref_tr.step(x.shape[1])
                assert_close(param_arrays(net), param_arrays(ref), 0.1,
                             "%s, step %d (%s)" % (kind, s, how))
                assert_same_on_all_ranks(param_arrays(net), "unreduced_%s_%d" % (kind, s))
                mine = [w for w in caught if "without allreduce_grads()" in str(w.message)]
                again = [w for w in caught if "after allreduce_grads()" in str(w.message)]
                if not several:
                    unreduced = reduced_step = 0
                assert (len(mine), len(again)) == (unreduced, reduced_step), \
                    (kind, s, [str(w.message) for w in caught])
                for w in mine[:1] + again[:1]:
                    assert w.filename == __file__, (str(w.message), w.filename)  # the caller's line
        if several:
            assert ("update() was called without allreduce_grads()" in str(mine[0].message)
                    and ("summed" if kind == "kvstore" else "averaged") in str(mine[0].message)), \
                str(mine[0].message)

SCENARIOS = {f.__name__: f for f in (
    grad_req_add, clip_between_allreduce_and_update, two_trainers_gan, unwrap_and_type_errors,
    insertion_order_and_null, row_sparse_embedding, row_sparse_optimizer_gluon,
    row_sparse_optimizer_module, row_sparse_weight_module, fp16_compression,
    optimizer_on_own_device,
    stale_on_some_ranks, stale_on_some_ranks_optimizer, amp_overflow_on_one_rank,
    different_parameters_on_some_ranks, module_different_parameters_on_some_ranks,
    different_settings_on_some_ranks, optimizer_on_several_contexts_without_kvstore,
    parameters_moved_to_more_contexts_after_the_trainer, update_without_allreduce_grads)}


if __name__ == "__main__":
    run_scenarios(SCENARIOS, list(SCENARIOS))
