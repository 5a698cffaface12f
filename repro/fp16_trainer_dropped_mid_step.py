"""A DistributedTrainer (Compression.fp16) dropped right after step(), with its float16 wire
buffers' casts and allreduces still queued: Python frees the buffers, the engine ops must
still run on live memory and the parameters must match a run that waits first.
Usage: mpirun -np 2 python repro/fp16_trainer_dropped_mid_step.py"""
import gc

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd

hvd.init()


def run(drop):
    net = gluon.nn.HybridSequential()
    for _ in range(4):
        net.add(gluon.nn.Dense(257, in_units=257))
    mx.random.seed(1)
    net.initialize()
    x = mx.nd.array(np.random.RandomState(hvd.rank()).randn(8, 257))
    for s in range(3):
        tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.01},
                                    compression=hvd.Compression.fp16, prefix="t%d%d." % (drop, s))
        with autograd.record():
            loss = net(x).sum()
        loss.backward()
        tr.step(8)
        if drop:
            del tr
            gc.collect()
            [mx.nd.ones((257 * 257,), dtype="float16") for _ in range(20)]  # reuse the memory
        else:
            mx.nd.waitall()
    return b"".join(p.data().asnumpy().tobytes() for p in net.collect_params().values())


a, b = run(True), run(False)
print("[rank %d] %s" % (hvd.rank(), "same bits" if a == b else "DIFFERENT"), flush=True)
