"""GluonCV segmentation (Fast-SCNN) with hvd.SyncBatchNorm on synthetic images.

    mxhorovodrun -np 2 python examples/gluoncv_syncbn.py
    OMP_NUM_THREADS=1 mpirun -np 2 python examples/gluoncv_syncbn.py --steps 20

Every BatchNorm layer of GluonCV's Fast-SCNN is ``hvd.SyncBatchNorm`` (``norm_layer=``),
so the batch statistics are those of the whole batch: every rank's batch together.
Nothing is downloaded (``pretrained_base=False``): the images are made here, with a fixed
seed, the same on every rank; each rank takes its own slice of every whole batch.

With N ranks and ``--batch-size B`` this trains exactly as one process with
``--batch-size N*B`` and ``--no-sync-bn`` (plain ``gluon.nn.BatchNorm``) does, up to
float rounding and dropout (``--dropout 0`` removes it); tests/examples/test_gluoncv_syncbn.py checks that with ``--check-file``.
"""
import argparse
import json
import time

import mxnet as mx
import numpy as np
from gluoncv.model_zoo.fastscnn import FastSCNN
from mxnet import autograd, gluon

import mxhorovod as hvd  # hvd

CLASSES = 4


def make_batches(steps, whole_batch, size, seed):
    """``steps`` whole batches of images (N, 3, size, size) and per-pixel labels (N, size,
    size): a background and up to three rectangles of other classes, each class its own
    colour plus noise. The same on every rank and for every number of ranks."""
    rng = np.random.RandomState(seed)
    colours = rng.uniform(-1, 1, (CLASSES, 3)).astype(np.float32)
    n = steps * whole_batch
    labels = np.zeros((n, size, size), np.float32)
    for i in range(n):
        for c in range(1, CLASSES):
            if rng.rand() < 0.8:
                y0, x0 = rng.randint(0, size - 8, 2)
                h, w = rng.randint(8, size // 2 + 1, 2)
                labels[i, y0:y0 + h, x0:x0 + w] = c
    images = colours[labels.astype(np.int64)].transpose(0, 3, 1, 2)
    images = images + rng.normal(0, 0.5, images.shape).astype(np.float32)
    return (images.reshape(steps, whole_batch, 3, size, size),
            labels.reshape(steps, whole_batch, size, size))


def build_net(size, sync_bn, seed, dropout=None):
    """Fast-SCNN with an auxiliary head; its layers are initialized as it is built.
    ``dropout``: the rate of its classifier's Dropout (default: GluonCV's, 0.1)."""
    mx.random.seed(seed)  # the same initial weights on every rank and in one process
    norm_layer = hvd.SyncBatchNorm if sync_bn else gluon.nn.BatchNorm  # hvd
    net = FastSCNN(CLASSES, aux=True, pretrained_base=False, height=size, width=size,
                   norm_layer=norm_layer)
    if dropout is not None:
        blocks = [net]
        for block in blocks:
            blocks.extend(block._children.values())
            if isinstance(block, gluon.nn.Dropout):
                block._rate = dropout  # Fast-SCNN takes no argument for it
    return net


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=10, help="training steps")
    p.add_argument("--batch-size", type=int, default=2, help="images per rank and step")
    p.add_argument("--image-size", type=int, default=64, help="height and width (64 or more)")
    p.add_argument("--lr", type=float, default=0.01,
                   help="for the whole batch: the same for any number of ranks")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0, help="data and initial weights")
    p.add_argument("--sync-bn", action=argparse.BooleanOptionalAction, default=True,
                   help="hvd.SyncBatchNorm; --no-sync-bn: gluon.nn.BatchNorm (per rank)")
    p.add_argument("--dropout", type=float, help="the classifier's dropout rate (default: "
                   "GluonCV's 0.1); 0 for --check-file, whose dropout masks differ by rank")
    p.add_argument("--no-hybridize", action="store_true")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                   help="float64: for checks against one process, free of float32 rounding")
    p.add_argument("--check-file", help="rank 0 writes the losses of every step and the "
                   "final parameters here (a .npz)")
    args = p.parse_args(argv)

    hvd.init()                                                   # hvd: start
    ranks, rank = hvd.size(), hvd.rank()
    whole = args.batch_size * ranks
    images, labels = make_batches(args.steps, whole, args.image_size, args.seed)
    net = build_net(args.image_size, args.sync_bn, args.seed, args.dropout)
    net.cast(args.dtype)
    if not args.no_hybridize:
        net.hybridize()
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)                # hvd: rank 0's weights
    # The learning rate is not scaled by the number of ranks. loss.backward() sums the
    # gradient over this rank's samples, step(batch_size) divides by the per-rank batch
    # and DistributedTrainer averages over the ranks: the mean over the whole batch, as
    # one process with step(ranks * batch_size) on the concatenated batch. SyncBatchNorm's
    # gamma/beta gradients are each rank's part of the whole batch's, so they average the
    # same way (docs/sync_batch_norm.md, "What each rank gets").
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": args.lr,  # hvd
                                                     "momentum": args.momentum})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss(axis=1)
    if rank == 0:
        print("gluoncv_syncbn: Fast-SCNN, %d rank%s, batch %d per rank (%d in all), %s"
              % (ranks, "" if ranks == 1 else "s", args.batch_size, whole,
                 "SyncBatchNorm" if args.sync_bn else "BatchNorm"), flush=True)

    losses, start = [], time.time()
    mine = slice(rank * args.batch_size, (rank + 1) * args.batch_size)  # hvd: my slice
    for step in range(args.steps):
        data = mx.nd.array(images[step, mine], dtype=args.dtype)
        label = mx.nd.array(labels[step, mine], dtype=args.dtype)
        with autograd.record():
            out, aux = net(data)
            loss = loss_fn(out, label) + 0.4 * loss_fn(aux, label)
        loss.backward()
        trainer.step(args.batch_size)                            # the per-rank batch
        # hvd: the mean loss over the whole batch.
        total = hvd.allreduce(loss.sum(), op=hvd.Sum, name="loss").asscalar()
        losses.append(float(total) / whole)
        if rank == 0:
            print("step %d: loss %.6f" % (step, losses[-1]), flush=True)
    if rank == 0:
        print("%.1f images/sec (%d rank%s)" % (args.steps * whole / (time.time() - start),
                                               ranks, "" if ranks == 1 else "s"), flush=True)
        if args.check_file:
            # Structural names (``features.0.gamma``): the same for both layer classes.
            final = {name: p.data().asnumpy()
                     for name, p in net._collect_params_with_prefix().items()}
            np.savez(args.check_file, losses=np.array(losses),
                     names=json.dumps(sorted(final)), **final)


if __name__ == "__main__":
    main()
