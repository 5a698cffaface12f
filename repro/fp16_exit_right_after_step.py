"""The script ends right after DistributedTrainer.step with Compression.fp16 (casts and
allreduces still queued in MXNet's engine at interpreter exit): every rank must exit 0.
Usage: for i in 1 2 3 4 5; do mpirun -np 2 python repro/fp16_exit_right_after_step.py; echo $?; done"""
import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd

hvd.init()
net = gluon.nn.HybridSequential()
for _ in range(6):
    net.add(gluon.nn.Dense(512, in_units=512))
net.initialize()
tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            compression=hvd.Compression.fp16)
x = mx.nd.ones((8, 512))
for _ in range(2):
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    tr.step(8)
# no wait, no shutdown: exit with the casts queued
