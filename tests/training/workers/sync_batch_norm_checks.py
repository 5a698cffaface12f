"""hvd.SyncBatchNorm against one process running gluon.nn.BatchNorm on the concatenated
batch, on every rank (tests/training/test_sync_batch_norm.py runs it on 2 and 3 ranks).

argv: the training runs, each '<dtype>-<hybridize>' (hybridize: none, plain, static for
static_alloc and static_shape), then 'gluoncv' for a GluonCV ResNet.

Each training run: a network with three SyncBatchNorm layers, two of them side by side
(their collectives are in flight together), per-rank batches of different sizes, 3 steps
of DistributedTrainer('sgd') with step(whole batch / ranks); at each step the outputs, the
input's gradient, every parameter's gradient summed over the ranks, and after the update the
parameters and running statistics equal those of the one-process reference. Then: one
layer used twice in one graph; predict mode and use_global_stats on rank 0 alone (no
collective: the other ranks do not call it); a layer over ranks {0, 1} (with 3 ranks the
third is refused at the call); channel counts and dtypes that differ between ranks (an
error naming the layer, on every rank). Prints RANK <r> OK."""
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.base import MXNetError

import mxhorovod as hvd

pair = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[pair])
r, n = hvd.rank(), hvd.size()
C, LR, STEPS = 16, 0.02, 3  # 16 channels: MKLDNN keeps them in its blocked layout
SIZES = [2 + i for i in range(n)]  # uneven per-rank batches
LO, B = sum(SIZES[:r]), sum(SIZES)
MINE = slice(LO, LO + SIZES[r])
TOL = {"float32": 2e-4, "float16": 2e-2}
REF_DTYPE = {"float32": "float32", "float16": "float32"}
timings = []


def close(got, want, tol, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    err = float(np.abs(got - want).max()) if want.size else 0.0
    assert err <= tol * scale, "rank %d: %s differs by %g (tolerance %g x %g)\ngot %s\nwant %s" % (
        r, what, err, tol, scale, got.ravel()[:8], want.ravel()[:8])


class Net(gluon.HybridBlock):
    """conv -> norm -> relu -> two norms side by side -> their sum (float16: no conv, which
    MXNet has no float16 CPU kernel for). With MKLDNN, the convolution's output and the
    relu's input gradient are in MKLDNN's blocked layout."""

    def __init__(self, norm, conv, **kwargs):
        super(Net, self).__init__(**kwargs)
        with self.name_scope():
            self.conv = gluon.nn.Conv2D(C, 3, padding=1, in_channels=3) if conv else None
            self.bn0 = norm(in_channels=C, gamma_initializer=mx.init.Uniform(1.0),
                            beta_initializer=mx.init.Uniform(1.0))
            self.bn_a = norm(in_channels=C, momentum=0.8, epsilon=1e-3)
            self.bn_b = norm(in_channels=C, scale=False)

    def hybrid_forward(self, F, x):
        h = F.relu(self.bn0(x if self.conv is None else self.conv(x)))
        return self.bn_a(h) + 2 * self.bn_b(h)


def pair_of_nets(dtype, hybridize, prefix):
    """(SyncBatchNorm net, BatchNorm reference) with the same initial values. The reference
    runs in a wider dtype on the same values: MXNet's own BatchNorm is further from the
    exact gradients than SyncBatchNorm (measured here, float16: gamma's gradient 3% off the
    float64 value, against 0.1%; float32: a convolution's weight gradient behind it 2e-3
    off, against 1e-5)."""
    nets = []
    for norm, cast in ((hvd.SyncBatchNorm, dtype), (gluon.nn.BatchNorm, REF_DTYPE[dtype])):
        mx.random.seed(7)
        net = Net(norm, dtype != "float16", prefix=prefix + norm.__name__.lower() + "_")
        net.initialize(mx.init.Uniform(0.5))
        net.cast(cast)
        nets.append(net)
    for p, q in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        q.set_data(p.data().astype(q.dtype))
    if hybridize == "plain":
        nets[0].hybridize()
    elif hybridize == "static":
        nets[0].hybridize(static_alloc=True, static_shape=True)
    return nets


def train_run(dtype, hybridize):
    tol = TOL[dtype]
    net, ref = pair_of_nets(dtype, hybridize, "%s_%s_" % (dtype, hybridize))
    opt = {"learning_rate": LR, "multi_precision": dtype == "float16"}
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", opt)
    ref_trainer = gluon.Trainer(ref.collect_params(), "sgd", dict(opt, multi_precision=False),
                                kvstore=None)
    rng = np.random.RandomState(3)
    params = list(net.collect_params().values())
    ref_params = list(ref.collect_params().values())
    for step in range(STEPS):
        data = (rng.randn(B, 3 if dtype != "float16" else C, 5, 5) * 2 + 1).astype(dtype)
        target = rng.randn(B, C, 5, 5).astype(dtype)
        outs = []
        for model, rows, dt in ((net, MINE, dtype), (ref, slice(0, B), REF_DTYPE[dtype])):
            x = mx.nd.array(data[rows], dtype=dt)
            x.attach_grad()
            with autograd.record():
                y = model(x)
                loss = gluon.loss.L2Loss()(y, mx.nd.array(target[rows], dtype=dt))
            loss.backward()
            outs.append((y, x))
        what = "%s %s step %d" % (dtype, hybridize, step)
        close(outs[0][0].asnumpy(), outs[1][0].asnumpy()[MINE], tol, what + " output")
        close(outs[0][1].grad.asnumpy(), outs[1][1].grad.asnumpy()[MINE], tol,
              what + " input gradient")
        trained = [(p, q) for p, q in zip(params, ref_params) if p.grad_req != "null"]
        sums = hvd.grouped_allreduce([p.grad() for p, _ in trained], op=hvd.Sum,
                                     name="sbn.grads.%s.%d" % (what, step))
        for (p, q), s in zip(trained, sums):
            close(s.asnumpy(), q.grad().asnumpy(), tol, "%s gradient of %s summed" % (what, p.name))
        trainer.step(B / n)  # averaged over n ranks: the mean over the whole batch
        ref_trainer.step(B)
        for p, q in zip(params, ref_params):
            close(p.data().asnumpy(), q.data().asnumpy(), tol, "%s %s after the update" % (what, p.name))
    return net, ref


def layer_twice():
    """One layer applied to two inputs in one graph: two backward collectives of one layer,
    which may be in flight together."""
    bn = hvd.SyncBatchNorm(in_channels=C, prefix="twice_")
    ref = gluon.nn.BatchNorm(in_channels=C, prefix="twice_ref_")
    bn.initialize(mx.init.Uniform(1.0))
    ref.initialize()
    for p, q in zip(bn.collect_params().values(), ref.collect_params().values()):
        q.set_data(p.data())
    bn.hybridize()
    rng = np.random.RandomState(5)
    a, b = rng.randn(B, C).astype("float32"), (rng.randn(B, C) * 3).astype("float32")
    got = []
    for layer, rows in ((bn, MINE), (ref, slice(0, B))):
        xa, xb = mx.nd.array(a[rows]), mx.nd.array(b[rows])
        xa.attach_grad()
        xb.attach_grad()
        with autograd.record():
            y = layer(xa) * layer(xb) + layer(xb)
        y.backward()
        got.append((y, xa.grad, xb.grad, layer.gamma.grad()))
    for i, what in enumerate(("output", "gradient of a", "gradient of b")):
        close(got[0][i].asnumpy(), got[1][i].asnumpy()[MINE], 2e-4, "layer twice: " + what)
    close(hvd.allreduce(got[0][3], op=hvd.Sum, name="sbn.twice.gamma").asnumpy(),
          got[1][3].asnumpy(), 2e-4, "layer twice: gamma's gradient summed")


def rank0_alone(net, ref):
    """Predict mode, a plain call, and use_global_stats on rank 0 only: no collective."""
    if r != 0:
        return
    x = mx.nd.array(np.random.RandomState(9).randn(5, 3, 5, 5).astype("float32"))
    want = ref(x).asnumpy()
    with autograd.predict_mode():
        close(net(x).asnumpy(), want, 2e-4, "predict mode on rank 0 alone")
    close(net(x).asnumpy(), want, 2e-4, "a call outside record() on rank 0 alone")
    with autograd.record(train_mode=False):
        y = net(x)
    y.backward()
    close(y.asnumpy(), want, 2e-4, "record(train_mode=False) on rank 0 alone")
    fixed = hvd.SyncBatchNorm(in_channels=3, use_global_stats=True,
                              running_mean_initializer=mx.init.Uniform(1.0),
                              running_variance_initializer=mx.init.Constant(2.0))
    fixed_ref = gluon.nn.BatchNorm(in_channels=3, use_global_stats=True)
    fixed.initialize()
    fixed_ref.initialize()
    for p, q in zip(fixed.collect_params().values(), fixed_ref.collect_params().values()):
        q.set_data(p.data())
    x.attach_grad()
    with autograd.record():
        y = fixed(x)
    y.backward()
    grad = x.grad.asnumpy()
    with autograd.record():
        y_ref = fixed_ref(x)
    y_ref.backward()
    close(y.asnumpy(), y_ref.asnumpy(), 2e-4, "use_global_stats output on rank 0 alone")
    close(grad, x.grad.asnumpy(), 2e-4, "use_global_stats input gradient on rank 0 alone")


def process_set_layer():
    bn = hvd.SyncBatchNorm(in_channels=C, process_set=pair, prefix="pair_")
    bn.initialize()
    x = np.random.RandomState(11).randn(SIZES[0] + SIZES[1], C).astype("float32")
    if pair.included():
        with autograd.record():
            y = bn(mx.nd.array(x[MINE]))
        ref = gluon.nn.BatchNorm(in_channels=C)
        ref.initialize()
        with autograd.record():
            y_ref = ref(mx.nd.array(x))
        close(y.asnumpy(), y_ref.asnumpy()[MINE], 2e-4, "a layer over ranks {0, 1}")
        return
    for hybridize in (False, True):  # rank 2: refused at the call, imperative or hybridized
        if hybridize:
            bn = hvd.SyncBatchNorm(in_channels=C, process_set=pair, prefix="pair_hybrid_")
            bn.initialize()
            bn.hybridize()
        try:
            with autograd.record():
                bn(mx.nd.ones((2, C))).asnumpy()
        except hvd.InvalidArgumentError as e:
            assert "SyncBatchNorm '%s'" % bn.name in str(e) and "not in its process set" in str(e), e
        else:
            raise AssertionError("rank %d: training a layer of a set it is not in did not raise" % r)
    with autograd.predict_mode():  # evaluating needs no collective: allowed
        bn(mx.nd.ones((2, C))).asnumpy()


def mismatch(kind):
    """Rank 0 differs from the others: every rank raises, naming the layer and the values."""
    dtype = "float16" if kind == "dtype" and r == 0 else "float32"
    channels = 3 if kind == "channels" and r == 0 else C
    bn = hvd.SyncBatchNorm(prefix="bad_%s_" % kind)
    bn.initialize()
    bn.cast(dtype)
    bn.hybridize()
    try:
        with autograd.record():
            bn(mx.nd.ones((2, channels, 3), dtype=dtype)).asnumpy()
    except MXNetError as e:
        text = str(e)
    else:
        raise AssertionError("rank %d: %s differing between ranks did not raise" % (r, kind))
    expect = ["SyncBatchNorm.%s.forward" % bn.name, "rank 0 has", "rank 1 has",
              "Mismatched shapes" if kind == "channels" else "Mismatched data types",
              "(3,)" if kind == "channels" else "float16"]
    assert all(e in text for e in expect), "rank %d: %s: %s" % (r, expect, text)


def gluoncv_resnet():
    """GluonCV's norm_layer (with its num_devices): a hybridized ResNet-18 v1b, one step."""
    import gluoncv
    nets = []
    for norm, kwargs in ((hvd.SyncBatchNorm, {"num_devices": 4}), (gluon.nn.BatchNorm, None)):
        net = gluoncv.model_zoo.resnet18_v1b(norm_layer=norm, norm_kwargs=kwargs, classes=10)
        net.initialize(mx.init.Xavier())
        net(mx.nd.zeros((1, 3, 32, 32)))  # ends the deferred initialization (no collective)
        nets.append(net)
    net, ref = nets
    for p, q in zip(net.collect_params().values(), ref.collect_params().values()):
        q.set_data(p.data())
    net.hybridize(static_alloc=True, static_shape=True)
    x = np.random.RandomState(1).rand(B, 3, 32, 32).astype("float32")
    got = []
    for model, rows in ((net, MINE), (ref, slice(0, B))):
        with autograd.record():
            y = model(mx.nd.array(x[rows]))
        y.backward()
        got.append((y, model.conv1.weight.grad()))
    close(got[0][0].asnumpy(), got[1][0].asnumpy()[MINE], 1e-3, "GluonCV ResNet output")
    close(hvd.allreduce(got[0][1], op=hvd.Sum, name="sbn.resnet").asnumpy(),
          got[1][1].asnumpy(), 1e-4, "GluonCV ResNet first convolution's gradient summed")


def large_mean():
    """float32 channels of mean 100 and std 0.01 (and one of mean -3e3, std 1): the
    statistics from float32 sums of x and x^2 lost the variance to cancellation (0, so the
    output was off by a factor of 30); against numpy's in float64 on the whole batch."""
    rng = np.random.RandomState(5)
    whole = rng.randn(B, 2, 3).astype(np.float64)
    whole[:, 0] = whole[:, 0] * 0.01 + 100
    whole[:, 1] = whole[:, 1] - 3e3
    whole = whole.astype(np.float32)
    bn = hvd.SyncBatchNorm(in_channels=2, prefix="large_mean_")
    bn.initialize()
    with autograd.record():
        y = bn(mx.nd.array(whole[MINE]))
    w = whole.astype(np.float64)
    want = (w - w.mean(axis=(0, 2), keepdims=True)) / np.sqrt(
        w.var(axis=(0, 2), keepdims=True) + 1e-5)
    # float32 input resolves 100 to 8e-6 (the std's 1e-3): the error floor of any kernel.
    close(y.asnumpy(), want[MINE], 3e-3, "channels of large mean: output")


def timed(what, fn, *args):
    t = time.time()
    out = fn(*args)
    timings.append("%s %.1fs" % (what, time.time() - t))
    return out


last = None
for run in sys.argv[1:]:
    if run == "gluoncv":
        timed(run, gluoncv_resnet)
    else:
        nets = timed(run, train_run, *run.split("-"))
        last = nets if run.startswith("float32") else last
timed("twice", layer_twice)
timed("large mean", large_mean)
if last is not None:
    timed("alone", rank0_alone, *last)
hvd.allreduce(mx.nd.ones((1,)), name="sbn.after_alone").asnumpy()  # the others went on
timed("process set", process_set_layer)
for kind in ("channels", "dtype"):
    timed(kind, mismatch, kind)
# Still usable after the errors: one more training pass of a fresh layer.
bn = hvd.SyncBatchNorm(prefix="after_")
bn.initialize()
with autograd.record():
    y = bn(mx.nd.ones((SIZES[r], C)) * r)
total = hvd.allreduce(y.sum(axis=0), op=hvd.Sum, name="sbn.after_errors").asnumpy()
close(total, np.zeros(C), 1e-4, "a pass after the errors (the whole batch's outputs add to 0)")
print("rank %d: %s" % (r, ", ".join(timings)), flush=True)
print("RANK %d OK" % r, flush=True)
