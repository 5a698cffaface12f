"""The smallest complete Gluon script for mxhorovod: a classifier on synthetic data.

    mxhorovodrun -np 2 python examples/gluon_quickstart.py
    OMP_NUM_THREADS=1 mpirun -np 2 python examples/gluon_quickstart.py

Every line that differs from a single-process script is marked ``# hvd``. With N ranks it
trains as one process would on batches N times larger (tests/docs/test_docs.py checks that).
"""
import argparse
import os
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxhorovod as hvd  # hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distributed_data import ShardSampler  # noqa: E402  # hvd: examples/


def make_dataset(samples=1024, features=20, classes=4, seed=0):
    """Points around one random centre per class; the same on every rank."""
    rng = np.random.RandomState(seed)
    centres = rng.normal(0, 0.3, (classes, features))
    labels = rng.randint(0, classes, samples)
    points = centres[labels] + rng.normal(0, 1, (samples, features))
    return gluon.data.ArrayDataset(points.astype(np.float32), labels.astype(np.float32))


def build_net():
    net = gluon.nn.HybridSequential(prefix="quickstart_")
    with net.name_scope():
        net.add(gluon.nn.Dense(32, activation="relu", in_units=20))
        net.add(gluon.nn.Dense(4, in_units=32))
    return net


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=3, help="passes over the data")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by ranks")
    p.add_argument("--save", help="rank 0 saves the parameters to this file at the end")
    args = p.parse_args(argv)

    hvd.init()                                       # hvd: start
    mx.random.seed(42)
    dataset = make_dataset()
    net = build_net()
    net.initialize(mx.init.Xavier())
    # hvd: averages the gradients over the ranks; the learning rate
    # grows with the number of ranks, as the batch does.
    trainer = hvd.DistributedTrainer(
        net.collect_params(), "sgd",
        {"learning_rate": args.lr * hvd.size(), "momentum": 0.9})
    # hvd: every rank starts from rank 0's weights.
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    # hvd: each rank reads its own equal share: the same steps everywhere.
    sampler = ShardSampler(len(dataset), hvd.size(), hvd.rank())
    loader = gluon.data.DataLoader(dataset, batch_size=args.batch_size,
                                   sampler=sampler, last_batch="discard")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)                     # hvd: a new order
        total, seen = mx.nd.zeros((1,)), 0
        for data, label in loader:
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(args.batch_size)            # the per-rank batch
            total += loss.sum()
            seen += args.batch_size
        # hvd: the mean loss over every rank's samples.
        total = hvd.allreduce(total, op=hvd.Sum, name="loss")
        mean = total.asscalar() / (seen * hvd.size())
        if hvd.rank() == 0:                          # hvd: rank 0 prints
            print("epoch %d: loss %.4f" % (epoch + 1, mean), flush=True)
    if hvd.rank() == 0 and args.save:                # hvd: and saves
        net.save_parameters(args.save)

if __name__ == "__main__":
    main()
