"""Compression.fp16 in DistributedTrainer across life-cycle events, against an astype
subclass (the old path), bit for bit on every rank:
  reinit    hvd.shutdown(); hvd.init() between steps, the same trainer
  threads   two trainers stepping at once from two Python threads
  reshape   a parameter re-created with another shape between steps (new wire buffer)
  recast    net.cast('float64') then back to float32 between steps (wire buffer reused)
Usage: mpirun -np 2 python repro/fp16_lifecycle.py"""
import threading

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd

hvd.init()
R = hvd.rank()


class AstypeFP16(hvd.Compression.fp16):
    @staticmethod
    def compress(tensor):
        return hvd.Compression.fp16.compress(tensor)

    @staticmethod
    def decompress(tensor, ctx):
        return hvd.Compression.fp16.decompress(tensor, ctx)


def mlp(width=17):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(width, activation="tanh", in_units=10), gluon.nn.Dense(3, in_units=width))
    mx.random.seed(3)
    net.initialize(mx.init.Xavier())
    return net


def step(net, tr, s, dtype="float32"):
    rng = np.random.RandomState(10 * s + R)
    x = mx.nd.array(rng.randn(4, 10), dtype=dtype)
    y = mx.nd.array(rng.randn(4, 3), dtype=dtype)
    with autograd.record():
        loss = gluon.loss.L2Loss()(net(x), y)
    loss.backward()
    tr.step(4)


def bits(net):
    return b"".join(p.data().asnumpy().tobytes() for p in net.collect_params().values())


def reinit(comp):
    net = mlp()
    tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                compression=comp, prefix="reinit%s." % comp.__name__)
    for s in range(4):
        step(net, tr, s)
        if s == 1:
            mx.nd.waitall()
            hvd.shutdown()
            hvd.init()
    return bits(net)


def threads(comp):
    nets = [mlp(), mlp(9)]
    trs = [hvd.DistributedTrainer(n.collect_params(), "sgd", {"learning_rate": 0.1},
                                  compression=comp, prefix="thr%d%s." % (k, comp.__name__))
           for k, n in enumerate(nets)]
    errs = []

    def run(k):
        try:
            for s in range(5):
                step(nets[k], trs[k], s + 100 * k)
        except Exception as e:  # noqa
            errs.append(repr(e))
    ts = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    if errs:
        raise RuntimeError(errs)
    return bits(nets[0]) + bits(nets[1])


def reshape(comp):
    net = mlp()
    tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                compression=comp, prefix="reshape%s." % comp.__name__)
    step(net, tr, 0)
    # Re-create the first layer 33 wide (and the second's input): same Parameter objects.
    d0, d1 = net[0], net[1]
    for p, shape in ((d0.weight, (33, 10)), (d0.bias, (33,)), (d1.weight, (3, 33))):
        p._data = p._grad = None
        p._deferred_init = ()
        p._shape = shape  # the setter only fills unknown dimensions
        p.initialize(mx.init.Constant(0.01), force_reinit=True)
    d0._units = 33
    tr._init_params()  # as gluon.Trainer after a re-initialization
    for s in range(1, 3):
        step(net, tr, s)
    return bits(net)


def recast(comp):
    net = mlp()
    tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                compression=comp, prefix="recast%s." % comp.__name__)
    step(net, tr, 0)
    net.cast("float64")
    step(net, tr, 1, "float64")
    net.cast("float32")
    step(net, tr, 2)
    return bits(net)


for name, fn in (("reinit", reinit), ("threads", threads), ("reshape", reshape),
                 ("recast", recast)):
    try:
        a, b = fn(hvd.Compression.fp16), fn(AstypeFP16)
        print("[rank %d] %-8s %s" % (R, name, "same bits" if a == b else "DIFFERENT"), flush=True)
    except Exception as e:  # noqa
        print("[rank %d] %-8s raised %s: %s" % (R, name, type(e).__name__, str(e)[:300]), flush=True)
hvd.shutdown()
