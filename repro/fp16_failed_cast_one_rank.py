"""A gradient that MKLDNN holds in its own layout on ONE rank (there: the gradient is used
as a convolution weight in an inference-mode forward between backward and step): its
float16 cast fails on that rank. What do the ranks see? With Compression.none the same
gradient's allreduce fails on every rank with an error naming it.
Usage: mpirun -np 2 python repro/fp16_failed_cast_one_rank.py fp16|none"""
import sys
import time

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd

hvd.init()
R = hvd.rank()
comp = hvd.Compression.fp16 if sys.argv[1] == "fp16" else hvd.Compression.none
conv = gluon.nn.Conv2D(64, 3, in_channels=64)
mx.random.seed(0)
conv.initialize()
tr = hvd.DistributedTrainer(conv.collect_params(), "sgd", {"learning_rate": 0.1},
                            compression=comp)
x = mx.nd.ones((1, 64, 8, 8))
t0 = time.time()
for step in range(5):
    with autograd.record():
        loss = conv(x).sum()
    loss.backward()
    g = conv.weight.grad()
    if R == 0 and step == 1:
        mx.nd.Convolution(x, g, no_bias=True, kernel=(3, 3), num_filter=64).wait_to_read()
    try:
        tr.step(1)
        w = conv.weight.data().asnumpy()
        print("[rank %d] step %d ok (%.1f s), weight sum %.6f" % (R, step, time.time() - t0,
                                                                 w.sum()), flush=True)
    except Exception as e:  # noqa
        print("[rank %d] step %d raised after %.1f s: %s" % (R, step, time.time() - t0,
                                                             str(e).splitlines()[0][:300]),
              flush=True)
mx.nd.waitall()
print("[rank %d] done" % R, flush=True)
