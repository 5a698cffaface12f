"""Data-parallel ResNet-50 v1 (gluoncv model zoo) on ImageNet with mxhorovod.

    # throughput on synthetic data, Gluon API (DistributedTrainer):
    mpirun -np 2 python examples/mxnet_imagenet_resnet50.py --benchmark
    # real data, Module API (DistributedOptimizer):
    mpirun -np 2 python examples/mxnet_imagenet_resnet50.py --mode module \\
        --rec-train train.rec --rec-val val.rec --num-examples 1281167

Learning rate: --lr per rank times the number of ranks, reached by a linear warm-up over
--warmup-epochs, then divided by 10 at each of --lr-decay-epochs. Each rank reads its part
of the RecordIO file (``num_parts``/``part_index``) and runs the same number of steps per
epoch: --num-examples // (ranks * batch size). Rank 0 prints per-epoch training loss,
validation accuracy (counts summed over ranks) and images/sec per rank and in total.
--fp16-allreduce sends gradients as float16 (a float16 model needs a GPU: MXNet 1.9 has no
float16 GEMM on CPU).
Needs gluoncv: pip install gluoncv==0.10.5.post0 "numpy<1.24" (in one command).
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
from checkpoint import latest_epoch, resume_gluon, resume_module, save_checkpoint  # noqa: E402
from imagenet_data import EqualStepsIter, SyntheticIter, record_iters  # noqa: E402

NAME = "resnet50"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--mode", choices=["gluon", "module"], default="gluon",
                   help="train with Gluon's DistributedTrainer or Module's DistributedOptimizer")
    p.add_argument("--rec-train", default=None, help="training RecordIO (.rec)")
    p.add_argument("--rec-val", default=None, help="validation RecordIO (.rec)")
    p.add_argument("--num-examples", type=int, default=1281167, help="images in --rec-train")
    p.add_argument("--benchmark", action="store_true", help="synthetic data, report speed")
    p.add_argument("--benchmark-steps", type=int, default=20, help="timed steps with --benchmark")
    p.add_argument("--warmup-steps", type=int, default=3, help="benchmark steps not timed")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--image-size", type=int, default=224, help="input height and width, pixels")
    p.add_argument("--classes", type=int, default=1000, help="output classes")
    p.add_argument("--epochs", "--num-epochs", type=int, default=90, help="passes over --rec-train")
    p.add_argument("--lr", type=float, default=0.05, help="per rank; scaled by size")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--wd", type=float, default=1e-4, help="weight decay")
    p.add_argument("--warmup-epochs", type=float, default=5, help="epochs of linear learning-rate warmup")
    p.add_argument("--lr-decay-epochs", "--lr-decay-epoch", default="30,60,80",
                   help="epochs at which lr is multiplied by --lr-decay")
    p.add_argument("--lr-decay", type=float, default=0.1, help="learning-rate factor at each --lr-decay-epochs")
    p.add_argument("--warmup-lr", type=float, default=None,
                   help="lr at the start of the warm-up (default: --lr)")
    # A float16 model is not offered: MXNet 1.9 has no float16 GEMM on CPU.
    p.add_argument("--fp16-allreduce", action="store_true",
                   help="gradients travel as float16 (Compression.fp16; gluon mode)")
    p.add_argument("--no-augment", action="store_true", help="centre crop, no mirror")
    p.add_argument("--no-shuffle", action="store_true", help="read --rec-train in order")
    p.add_argument("--checkpoint-dir", default=None, help="rank 0 saves checkpoints here (none: no checkpoints)")
    p.add_argument("--save-every", "--save-frequency", type=int, default=1,
                   help="epochs between checkpoints (with --checkpoint-dir; 0: the last only)")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    p.add_argument("--log-interval", type=int, default=0, help="steps between rank-0 logs")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--data-nthreads", type=int, default=2, help="decoding threads per rank")
    p.add_argument("--gradient-predivide-factor", type=float, default=1.0,
                   help="gradients divided by it before the sum over ranks, by size/it after")
    p.add_argument("--gradient-as-bucket-view", action="store_true",
                   help="DistributedTrainer's gradient_as_bucket_view (gluon mode): the "
                   "gradients live in flat buckets, reduced with no packing (in shared memory "
                   "on one host)")
    # The rest of Horovod's examples/mxnet/mxnet_imagenet_resnet50.py command line.
    h = p.add_argument_group("Horovod's flags, accepted so its command lines run here")
    h.add_argument("--use-rec", action="store_true", help="read --rec-train (needed here anyway)")
    h.add_argument("--rec-train-idx", default=None, help="not needed: parts by num_parts")
    h.add_argument("--rec-val-idx", default=None, help="not needed")
    h.add_argument("--model", default="resnet50_v1", choices=["resnet50_v1"], help="the model")
    h.add_argument("--dtype", default="float32", choices=["float32"],
                   help="MXNet 1.9 has no float16 GEMM on CPU")
    h.add_argument("--lr-mode", default="step", choices=["step"], help="learning-rate schedule")
    h.add_argument("--no-cuda", action="store_true", help="this example trains on CPU")
    args = p.parse_args(argv)
    if args.use_rec and not args.rec_train:
        p.error("--use-rec needs --rec-train")
    if not args.benchmark and not args.rec_train:
        p.error("give --rec-train (and --rec-val), or --benchmark")
    if args.fp16_allreduce and args.mode == "module":
        p.error("--fp16-allreduce needs --mode gluon (DistributedOptimizer sends as is)")
    if args.gradient_as_bucket_view and args.mode == "module":
        p.error("--gradient-as-bucket-view needs --mode gluon (a DistributedTrainer option)")
    return args


def lr_scheduler(args, steps_per_epoch, size):
    base = args.lr * size
    decay = [int(float(e) * steps_per_epoch) for e in args.lr_decay_epochs.split(",") if e]
    warmup = int(args.warmup_epochs * steps_per_epoch)
    decay = [d for d in decay if d > warmup] or [10 ** 12]
    begin = args.lr if args.warmup_lr is None else args.warmup_lr
    return mx.lr_scheduler.MultiFactorScheduler(step=decay, factor=args.lr_decay, base_lr=base,
                                                warmup_steps=warmup,
                                                warmup_begin_lr=begin if warmup else base,
                                                warmup_mode="linear")


def make_optimizer(args, steps_per_epoch, size, rescale_grad=1.0):
    return mx.optimizer.SGD(learning_rate=args.lr * size, momentum=args.momentum, wd=args.wd,
                            lr_scheduler=lr_scheduler(args, steps_per_epoch, size),
                            rescale_grad=rescale_grad)


def build_net(args):
    from gluoncv.model_zoo import get_model
    net = get_model("resnet50_v1", classes=args.classes, pretrained=False)
    net.initialize(mx.init.MSRAPrelu())
    return net


def data_iters(args, rank, size):
    """(train, val or None, steps per epoch): every rank gets the same number of steps."""
    if args.benchmark:
        steps = args.warmup_steps + args.benchmark_steps
        return SyntheticIter(args.batch_size, args.image_size, args.classes, steps), None, steps
    steps = args.num_examples // (size * args.batch_size)
    if steps == 0:
        raise SystemExit("--num-examples %d is less than one batch per rank" % args.num_examples)
    train, val = record_iters(args.rec_train, args.rec_val, args.batch_size, args.image_size,
                              rank, size, augment=not args.no_augment,
                              shuffle=not args.no_shuffle, threads=args.data_nthreads,
                              seed=args.seed)
    return EqualStepsIter(train, steps), val, steps


def count_correct(outputs, batch):
    n = batch.data[0].shape[0] - (batch.pad or 0)
    pred = outputs.argmax(axis=1).asnumpy()[:n]
    return int((pred == batch.label[0].asnumpy()[:n]).sum()), n


def summed(values, name):
    return hvd.allreduce(mx.nd.array(values, dtype="float64"), op=hvd.Sum, name=name).asnumpy()


def validate(predict, val):
    """Top-1 accuracy over every rank's part of the validation set."""
    if val is None:
        return None
    val.reset()
    correct = seen = 0
    for batch in val:
        c, n = count_correct(predict(batch), batch)
        correct, seen = correct + c, seen + n
    correct, seen = summed([correct, seen], "val.counts")
    return correct / max(seen, 1.0)


def report(args, epoch, loss, acc, images, seconds, size, timed_steps=None):
    if hvd.rank() != 0:
        return
    ips = images / seconds
    what = "benchmark" if args.benchmark else "epoch %d" % (epoch + 1)
    print("%s: train loss %.4f%s, %.1f images/sec per rank, %.1f images/sec total "
          "(%d rank%s, batch %d per rank%s)"
          % (what, loss, "" if acc is None else ", val accuracy %.4f" % acc, ips / size, ips,
             size, "" if size == 1 else "s", args.batch_size,
             ", %d timed steps" % timed_steps if timed_steps else ""), flush=True)


def run_gluon(args, train, val, steps, start_epoch):
    size = hvd.size()
    net = build_net(args)
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = hvd.DistributedTrainer(
        net.collect_params(), make_optimizer(args, steps, size),
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
        gradient_predivide_factor=args.gradient_predivide_factor,
        gradient_as_bucket_view=args.gradient_as_bucket_view)
    # Finish deferred shapes on every rank, so rank 0 can load and the others receive.
    net(mx.nd.zeros((1, 3, args.image_size, args.image_size)))
    if start_epoch:
        resume_gluon(args.checkpoint_dir, NAME, start_epoch, net, trainer)
    else:
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def inputs(batch):
        # ImageRecordIter returns cpu_pinned arrays; the parameters live on cpu.
        return batch.data[0].as_in_context(mx.cpu()), batch.label[0].as_in_context(mx.cpu())

    def predict(batch):
        return net(inputs(batch)[0])

    for epoch in range(start_epoch, 1 if args.benchmark else args.epochs):
        train.reset()
        loss_sum, tic, timed = mx.nd.zeros((1,)), time.time(), 0
        for step, batch in enumerate(train):
            if args.benchmark and step == args.warmup_steps:
                mx.nd.waitall()
                tic, loss_sum = time.time(), mx.nd.zeros((1,))
            data, label = inputs(batch)
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(args.batch_size)
            loss_sum += loss.sum()
            # Keep Python at most one step ahead of the engine (it needs only the forward).
            loss_sum.wait_to_read()
            timed += 1
            log_step(args, epoch, step, loss)
        mx.nd.waitall()
        if args.benchmark:
            timed = args.benchmark_steps
        elapsed = time.time() - tic
        loss_mean = summed([loss_sum.asscalar()], "train.loss")[0] / (timed * args.batch_size * size)
        report(args, epoch, loss_mean, validate(predict, val), timed * args.batch_size * size,
               elapsed, size, timed if args.benchmark else None)
        maybe_save(args, epoch, net=net, trainer=trainer)


def run_module(args, train, val, steps, start_epoch):
    size = hvd.size()
    net = build_net(args)
    out = net(mx.sym.var("data"))
    mod = mx.mod.Module(mx.sym.SoftmaxOutput(out, name="softmax"), context=mx.cpu())
    mod.bind(data_shapes=train.provide_data, label_shapes=train.provide_label)
    mod.init_params(mx.init.MSRAPrelu())
    arg, aux = mod.get_params()
    hvd.broadcast_parameters(arg, root_rank=0, prefix="arg.")
    hvd.broadcast_parameters(aux, root_rank=0, prefix="aux.")
    mod.set_params(arg, aux)
    opt = hvd.DistributedOptimizer(make_optimizer(args, steps, size,
                                                  rescale_grad=1.0 / args.batch_size),
                                   gradient_predivide_factor=args.gradient_predivide_factor)
    mod.init_optimizer(kvstore=None, optimizer=opt)
    if start_epoch:
        resume_module(args.checkpoint_dir, NAME, start_epoch, mod)
    metric = mx.metric.CrossEntropy()

    def predict(batch):
        mod.forward(batch, is_train=False)
        return mod.get_outputs()[0]

    for epoch in range(start_epoch, 1 if args.benchmark else args.epochs):
        train.reset()
        metric.reset()
        tic = time.time()
        for step, batch in enumerate(train):
            if args.benchmark and step == args.warmup_steps:
                mx.nd.waitall()
                tic = time.time()
                metric.reset()
            mod.forward_backward(batch)
            mod.update()
            mod.update_metric(metric, batch.label)
            if args.log_interval and step % args.log_interval == 0 and hvd.rank() == 0:
                print("epoch %d step %d: loss %.4f" % (epoch + 1, step, metric.get()[1]),
                      flush=True)
        mx.nd.waitall()
        timed = args.benchmark_steps if args.benchmark else steps
        elapsed = time.time() - tic
        loss_mean = summed([metric.get()[1]], "train.loss")[0] / size
        report(args, epoch, loss_mean, validate(predict, val), timed * args.batch_size * size,
               elapsed, size, timed if args.benchmark else None)
        maybe_save(args, epoch, module=mod)


def log_step(args, epoch, step, loss):
    if args.log_interval and step % args.log_interval == 0 and hvd.rank() == 0:
        print("epoch %d step %d: loss %.4f" % (epoch + 1, step, loss.mean().asscalar()),
              flush=True)


def maybe_save(args, epoch, **what):
    if args.checkpoint_dir and not args.benchmark and (
            (args.save_every > 0 and (epoch + 1) % args.save_every == 0)
            or epoch + 1 == args.epochs):
        save_checkpoint(args.checkpoint_dir, NAME, epoch + 1, **what)


def main(argv=None):
    args = parse_args(argv)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    mx.random.seed(args.seed + rank)
    np.random.seed(args.seed + rank)
    train, val, steps = data_iters(args, rank, size)
    start_epoch = 0
    if args.resume and args.checkpoint_dir and not args.benchmark:
        start_epoch = latest_epoch(args.checkpoint_dir, NAME)
    if rank == 0:
        print("mxhorovod ResNet-50 v1 (%s API): %d rank%s, batch %d per rank, %d steps per "
              "epoch, image %d, lr %g after warm-up, data: %s%s"
              % (args.mode, size, "" if size == 1 else "s", args.batch_size, steps, args.image_size,
                 args.lr * size, "synthetic" if args.benchmark else args.rec_train,
                 ", resuming after epoch %d" % start_epoch if start_epoch else ""), flush=True)
    (run_module if args.mode == "module" else run_gluon)(args, train, val, steps, start_epoch)
    hvd.shutdown()


if __name__ == "__main__":
    main()
