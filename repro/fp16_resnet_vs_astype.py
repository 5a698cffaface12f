"""gluoncv ResNet-18 (BatchNorm, MKLDNN convolutions, 11.7M parameters), 3 steps of
DistributedTrainer with Compression.fp16 against the same with an astype subclass (the old
path): every parameter and BatchNorm statistic bit-identical on every rank.
Usage: mpirun -np 2 python repro/fp16_resnet_vs_astype.py"""
import numpy as np
import mxnet as mx
from mxnet import autograd, gluon
from gluoncv.model_zoo import get_model

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


def run(comp):
    net = get_model("resnet18_v1", classes=10)
    mx.random.seed(5)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    rng = np.random.RandomState(R)
    x = mx.nd.array(rng.randn(4, 3, 32, 32))
    y = mx.nd.array(rng.randint(0, 10, 4))
    net(x).wait_to_read()  # deferred init, and an inference forward (MKLDNN layouts)
    tr = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                {"learning_rate": 0.1, "momentum": 0.9}, compression=comp)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(3):
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        tr.step(4)
    return [p.data().asnumpy() for p in net.collect_params().values()]


a, b = run(hvd.Compression.fp16), run(AstypeFP16)
diff = [k for k, (u, v) in enumerate(zip(a, b)) if u.tobytes() != v.tobytes()]
print("[rank %d] %d arrays, %d differ %s" % (R, len(a), len(diff), diff[:5]), flush=True)
