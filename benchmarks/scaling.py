"""Scaling efficiency of data-parallel training beside the machine's compute ceiling.

    python benchmarks/scaling.py                       # ResNet-50 v1 and the MNIST CNN, 2 ranks
    python benchmarks/scaling.py --model mnist --steps 400

For each model, on synthetic data (random images and labels, so no disk or decoding in
the way), SGD with momentum, one OpenMP thread per process, this script runs in turn:

1. one process alone, a plain ``gluon.Trainer`` (kvstore=None): throughput(1);
2. ``--np`` ranks under mpirun, ``hvd.DistributedTrainer``: throughput(p), all ranks'
   images together; for mxhorovod also with ``gradient_as_bucket_view=True`` (row
   "mxhorovod bucket views": the gradients live in flat buckets, reduced with no packing);
3. the ceiling: ``--np`` independent single processes (plain Trainer, no communication)
   at the same time; what the cores and memory bandwidth allow with no communication at all;
4. lockstep: ``--np`` ranks under mpirun, plain Trainer, and after every step
   ``mx.nd.waitall()`` and an MPI barrier (mpi4py), no gradient exchange: what keeping the
   ranks in step costs by itself (each step waits for the slowest rank, and the ranks' busy
   phases line up on the shared cores and memory). No synchronous data-parallel training can
   beat it; the waitall also keeps Python from running ahead, so it is a slightly low bound.

Scaling efficiency = throughput(p) / (p x throughput(1)); ceiling = sum of the independent
processes' throughputs / (p x throughput(1)); the gap between them is what communication
and synchronization cost, and the lockstep row splits it: ceiling - lockstep is the price of
synchronization alone, lockstep - efficiency that of the gradient exchange. Each throughput is images/sec over blocks of steps (each block ends with
``mx.nd.waitall()``), the median (min..max) over --blocks blocks after --warmup steps.
Models: "resnet50" (``mxnet.gluon.model_zoo.vision.resnet50_v1``, batch 8 per rank,
3 x --image-size^2 images, 1000 classes) and "mnist" (the CNN of examples/mxnet_mnist.py,
imported from there; batch 64 per rank, 1 x 28 x 28). With Horovod importable
(--horovod-python), step 2 is run for it too. Prints a table and one JSON line.
"""
import argparse
import os
import sys
import time

import common
from common import stats

MODELS = {"resnet50": {"batch": 8, "steps": 20}, "mnist": {"batch": 64, "steps": 200}}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50,mnist", help="comma-separated: resnet50, mnist (default both)")
    ap.add_argument("--steps", type=int, default=0,
                    help="timed steps per run (default: resnet50 20, mnist 200)")
    ap.add_argument("--blocks", type=int, default=10, help="timed blocks the steps are "
                    "split into (the median is over blocks)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--batch-size", type=int, default=0,
                    help="per rank (default: resnet50 8, mnist 64)")
    ap.add_argument("--image-size", type=int, default=224, help="resnet50 input size")
    ap.add_argument("--quick", action="store_true", help="2 blocks of 1-2 steps, ResNet-50 "
                    "on 32 x 32 images (the smoke test)")
    ap.add_argument("--trainer", default="dist", choices=["dist", "plain", "lockstep"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--bucket-view", action="store_true", help=argparse.SUPPRESS)
    common.add_launch_args(ap, configs=("default",))
    args = ap.parse_args(argv)
    args.models = [m for m in args.model.split(",") if m]
    for m in args.models:
        if m not in MODELS:
            ap.error("unknown model %r (resnet50 or mnist)" % m)
    if args.quick:
        args.blocks, args.warmup, args.image_size = 2, 1, min(args.image_size, 32)
    return args


def steps_for(args, model):
    if args.steps:
        return args.steps
    return 2 * args.blocks if args.quick else MODELS[model]["steps"]


def batch_for(args, model):
    return args.batch_size or MODELS[model]["batch"]


def build(model, args, impl):
    """(net, input shape, classes) for ``model``."""
    import mxnet as mx
    if model == "resnet50":
        return (mx.gluon.model_zoo.vision.resnet50_v1(),
                (3, args.image_size, args.image_size), 1000)
    if impl == "horovod":
        # examples/mxnet_mnist.py does `import mxhorovod as hvd`: under Horovod's Python
        # that name is horovod.mxnet (the same API); the example's model is unchanged.
        import horovod.mxnet
        sys.modules.setdefault("mxhorovod", horovod.mxnet)
    sys.path.insert(0, os.path.join(common.ROOT, "examples"))
    from mxnet_mnist import build_net
    return build_net(), (1, 28, 28), 10


def worker(args):
    """One training run; the result on rank 0 (every rank of a plain run is rank 0)."""
    import mxnet as mx
    from mxnet import autograd, gluon

    model = args.models[0]
    dist = args.trainer == "dist"
    lockstep = args.trainer == "lockstep"
    comm = None
    size = 1
    if dist or lockstep:
        from mpi4py import MPI
        comm, size = MPI.COMM_WORLD, MPI.COMM_WORLD.Get_size()
    if dist:
        hvd = common.load_hvd(args.impl)
        hvd.init()
    batch, steps = batch_for(args, model), steps_for(args, model)
    mx.random.seed(1)
    net, shape, classes = build(model, args, args.impl)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net.hybridize(static_alloc=True, static_shape=True)
    x = mx.nd.random.uniform(shape=(batch,) + shape)
    y = mx.nd.random.randint(0, classes, shape=(batch,)).astype("float32")
    with autograd.record():  # deferred initialization; a training-mode forward, since
        net(x).wait_to_read()  # an inference one lets MKLDNN reorder the weights
    opt = {"learning_rate": 0.01 * size, "momentum": 0.9}
    if dist:
        views = {"gradient_as_bucket_view": True} if args.bucket_view else {}
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", opt, **views)
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    else:
        trainer = gluon.Trainer(net.collect_params(), "sgd", opt, kvstore=None)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step():
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(batch)
        if lockstep:
            mx.nd.waitall()
            comm.Barrier()

    for _ in range(args.warmup):
        step()
    mx.nd.waitall()
    per_block = max(1, steps // args.blocks)
    rates = []
    for _ in range(args.blocks):
        if comm is not None:
            comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(per_block):
            step()
        mx.nd.waitall()
        dt = time.perf_counter() - t0
        if comm is not None:
            dt = comm.allreduce(dt, op=MPI.MAX)  # the slowest rank sets the pace
        rates.append(per_block * batch * size / dt)
    if dist:
        hvd.shutdown()
    if comm is not None and comm.Get_rank() != 0:
        return None
    return {"model": model, "ranks": size, "trainer": args.trainer, "batch": batch,
            "steps": per_block * args.blocks, "images_per_s": stats(rates),
            "module": hvd.__file__ if dist else None}


def run_model(args, model):
    """The three runs for ``model``; returns a result dict."""
    script = os.path.abspath(__file__)
    base = ["--worker", "--model", model, "--blocks", args.blocks, "--warmup", args.warmup,
            "--image-size", args.image_size, "--steps", steps_for(args, model),
            "--batch-size", batch_for(args, model)]
    plain = base + ["--trainer", "plain"]
    env = common.rank_env()
    one = common.launch(1, script, plain, timeout=args.timeout)
    out = {"model": model, "one": one, "p": args.np}
    out["dist"] = {}
    for impl, config, python in common.runs(args):
        try:
            out["dist"][common.label({"impl": impl, "config": config})] = common.launch(
                args.np, script, base + ["--impl", impl, "--config", config,
                                         "--trainer", "dist"],
                python=python, env=common.CONFIGS[config], timeout=args.timeout)
        except RuntimeError as e:
            print("launch failed (%s): %s" % (impl, e), file=sys.stderr)
            out["dist"][common.label({"impl": impl, "config": config})] = {
                "error": common.error_summary(e)}
    if "default" in args.configs:
        name = "mxhorovod bucket views"
        try:
            out["dist"][name] = common.launch(
                args.np, script, base + ["--impl", "mxhorovod", "--config", "default",
                                         "--trainer", "dist", "--bucket-view"],
                timeout=args.timeout)
        except RuntimeError as e:
            print("launch failed (%s): %s" % (name, e), file=sys.stderr)
            out["dist"][name] = {"error": common.error_summary(e)}
    # The ceiling: p single processes at once, no communication.
    procs = [common.start(common.mpirun_cmd(1, sys.executable, script, plain), env)
             for _ in range(args.np)]
    outs = common.finish(procs, args.timeout, "independent runs of %s" % model)
    out["independent"] = [common.results_of(o)[0] for o in outs]
    out["lockstep"] = common.launch(args.np, script, base + ["--trainer", "lockstep"],
                                    timeout=args.timeout)
    return out


def summarize(r):
    """Rows of one model's runs: throughput, efficiency and the ceiling."""
    p = r["p"]
    one = r["one"]["images_per_s"]["median"]
    indep = sum(x["images_per_s"]["median"] for x in r["independent"])
    ceiling = indep / (p * one)
    rows = [{"model": r["model"], "run": "1 process", "ranks": 1,
             "images_per_s": r["one"]["images_per_s"]},
            {"model": r["model"], "run": "%d independent processes" % p, "ranks": p,
             "images_per_s": stats([indep]),
             "each": [x["images_per_s"] for x in r["independent"]], "ceiling": ceiling}]
    lock = r["lockstep"]["images_per_s"]
    lockstep = lock["median"] / (p * one)
    rows.append({"model": r["model"], "run": "%d ranks in lockstep, no exchange" % p,
                 "ranks": p, "images_per_s": lock, "efficiency": lockstep,
                 "ceiling": ceiling, "gap": ceiling - lockstep})
    for name, d in r["dist"].items():
        if "error" in d:
            rows.append({"model": r["model"], "run": name, "ranks": p, "error": d["error"]})
            continue
        eff = d["images_per_s"]["median"] / (p * one)
        rows.append({"model": r["model"], "run": name, "ranks": p,
                     "images_per_s": d["images_per_s"], "efficiency": eff,
                     "ceiling": ceiling, "gap": ceiling - eff,
                     "lockstep_gap": lockstep - eff})
    return rows


def report(model_results):
    rows = [row for r in model_results for row in summarize(r)]

    def ips(s):
        return "%.1f (%.1f..%.1f)" % (s["median"], s["min"], s["max"]) if s["reps"] > 1 \
            else "%.1f" % s["median"]
    common.print_table(
        ["model", "run", "ranks", "images/s med (min..max)", "efficiency", "ceiling",
         "ceiling - efficiency", "lockstep - efficiency"],
        [[r["model"], r["run"], r["ranks"],
          ips(r["images_per_s"]) if "images_per_s" in r else "failed: " + r["error"][:50],
          "%.3f" % r["efficiency"] if "efficiency" in r else "-",
          "%.3f" % r["ceiling"] if "ceiling" in r else "-",
          "%.3f" % r["gap"] if "gap" in r else "-",
          "%.3f" % r["lockstep_gap"] if "lockstep_gap" in r else "-"] for r in rows],
        title="training throughput, synthetic data; efficiency = images/s(p) / (p x "
              "images/s(1)); ceiling = same for p independent processes; lockstep = p ranks with a "
              "barrier per step and no exchange (same script run)")
    return common.emit("scaling", rows)


def main(argv=None):
    args = parse_args(argv)
    if args.worker or common.under_mpirun():
        res = worker(args)
        if res is not None:
            common.emit_result(res)
        return 0
    report([run_model(args, m) for m in args.models])
    return 0


if __name__ == "__main__":
    sys.exit(main())
