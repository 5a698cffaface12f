"""Scaling efficiency of data-parallel training beside the machine's compute ceiling.

    python benchmarks/scaling.py                       # ResNet-50 v1 and the MNIST CNN, 2 ranks
    python benchmarks/scaling.py --model mnist --steps 400

For each model, on synthetic data (random images and labels, so no disk or decoding in
the way), SGD with momentum, one OpenMP thread per process, one mpirun of ``--np`` ranks per
library (mxhorovod, and Horovod when importable) runs these modes **in alternation, block
by block** (a block: the steps of one mode, ended by ``mx.nd.waitall()``), so that every
mode sees the same moments of a noisy machine (measured in separate launches minutes apart,
the rates of one configuration drifted by 20-30% on the 2-core machine of
docs/benchmarks.md, more than the differences measured):

1. "1 process": rank 0 trains alone with a plain ``gluon.Trainer`` (kvstore=None) while
   the other ranks sleep (a nonblocking barrier polled every millisecond): throughput(1);
2. "independent": every rank trains with a plain Trainer, no communication within the
   block: what the cores and memory bandwidth allow with no communication at all (each
   rank's rate over its own block time, summed);
3. "lockstep": plain Trainer, and after every step ``mx.nd.waitall()`` and an MPI barrier
   (mpi4py), no gradient exchange: what keeping the ranks in step costs by itself (each
   step waits for the slowest rank, and the ranks' busy phases line up on the shared cores
   and memory). No synchronous data-parallel training can beat it; the waitall also keeps
   Python from running ahead, so it is a slightly low bound;
4. the library's ``DistributedTrainer``: throughput(p), all ranks' images together (the
   slowest rank's block time); for mxhorovod also with ``gradient_as_bucket_view=True``
   (row "mxhorovod bucket views": the gradients live in flat buckets, reduced with no
   packing).

Each mode trains its own copy of the model (same architecture and initialization), so the
trainers never share gradient arrays. Per round (one block of each mode, the starting mode
rotating from round to round): scaling efficiency = throughput(p) / (p x throughput(1));
ceiling = sum of the independent ranks' throughputs / (p x throughput(1)); the gap between
them is what communication and synchronization cost, and the lockstep row splits it:
ceiling - lockstep is the price of synchronization alone, lockstep - efficiency that of the
gradient exchange. Reported: the median (min..max) over --blocks rounds of each per-round
figure, after --warmup steps of every mode. The library stays loaded in every mode (its
background thread idle outside its own blocks), as in a real job. A second table says where
the CPU went: per mode, the CPU ms per step of each rank's threads (from
/proc/self/task/*/schedstat) in three kinds: the main (Python) thread, MXNet's threads
(engine workers, OpenMP; any thread that starts later counts here), and the threads that
``MPI_Init`` and ``hvd.init()`` started (the background thread; MPICH starts none); the
mean over the ranks that train, the median over rounds. On a machine with as many ranks as
cores the job is CPU-bound, and a DistributedTrainer step costs what its
extra CPU ms cost (2026-12-03, MNIST on 2 cores: the per-step batch-size check's array took
~0.7 ms of the main thread per step, measured this way).
Models: "resnet50" (``mxnet.gluon.model_zoo.vision.resnet50_v1``, batch 8 per rank,
3 x --image-size^2 images, 1000 classes) and "mnist" (the CNN of examples/mxnet_mnist.py,
imported from there; batch 64 per rank, 1 x 28 x 28). Prints a table and one JSON line.
"""
import argparse
import os
import sys
import time

import common
from common import stats

MODELS = {"resnet50": {"batch": 8, "steps": 20}, "mnist": {"batch": 64, "steps": 200}}
CPU_KINDS = ("main", "mxnet", "library")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50,mnist", help="comma-separated: resnet50, mnist (default both)")
    ap.add_argument("--steps", type=int, default=0,
                    help="timed steps per mode (default: resnet50 20, mnist 200)")
    ap.add_argument("--blocks", type=int, default=10, help="rounds: each mode's timed "
                    "steps are split into this many blocks, one per round (the medians are "
                    "over rounds)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps of each mode first")
    ap.add_argument("--batch-size", type=int, default=0,
                    help="per rank (default: resnet50 8, mnist 64)")
    ap.add_argument("--image-size", type=int, default=224, help="resnet50 input size")
    ap.add_argument("--quick", action="store_true", help="2 blocks of 1-2 steps, ResNet-50 "
                    "on 32 x 32 images (the smoke test)")
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
    from mxnet_mnist import build_net  # examples/ is on the ranks' PYTHONPATH (rank_env)
    return build_net(), (1, 28, 28), 10


def idle_barrier(comm):
    """A barrier that sleeps while it waits (MPI's blocking one polls a core at full speed,
    which would take a core from the rank that trains alone)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.001)


def modes_for(impl):
    return ["one", "independent", "lockstep", "dist"] + (["views"] if impl == "mxhorovod" else [])


def worker(args):
    """The modes in alternation; the per-round rates on rank 0."""
    import mxnet as mx
    from mxnet import autograd, gluon

    mx.nd.ones((4,)).wait_to_read()  # MXNet's engine threads started
    before = set(common.thread_cpu())
    from mpi4py import MPI  # MPI_Init: threads MPI starts (if any) count as the library's

    model = args.models[0]
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    hvd = common.load_hvd(args.impl)
    hvd.init()
    hvd.allreduce(mx.nd.ones((4,)), name="scaling.threads").wait_to_read()
    library = set(common.thread_cpu()) - before  # MPI's and init()'s: background thread
    batch, steps = batch_for(args, model), steps_for(args, model)
    modes = modes_for(args.impl)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    mx.random.seed(1)
    x = y = None
    opt = {"learning_rate": 0.01 * size, "momentum": 0.9}
    nets, trainers = {}, {}
    for kind in ("plain", "dist", "views") if "views" in modes else ("plain", "dist"):
        mx.random.seed(1)
        net, shape, classes = build(model, args, args.impl)
        net.initialize(mx.init.Xavier(magnitude=2.0))
        net.hybridize(static_alloc=True, static_shape=True)
        if x is None:
            x = mx.nd.random.uniform(shape=(batch,) + shape)
            y = mx.nd.random.randint(0, classes, shape=(batch,)).astype("float32")
        with autograd.record():  # deferred initialization; a training-mode forward, since
            net(x).wait_to_read()  # an inference one lets MKLDNN reorder the weights
        if kind == "plain":
            trainers[kind] = gluon.Trainer(net.collect_params(), "sgd", opt, kvstore=None)
        else:
            views = {"gradient_as_bucket_view": True} if kind == "views" else {}
            trainers[kind] = hvd.DistributedTrainer(net.collect_params(), "sgd", opt, **views)
            hvd.broadcast_parameters(net.collect_params(), root_rank=0)
            mx.nd.waitall()  # the nets' parameter names (hence broadcast names) may repeat
        nets[kind] = net

    def step(mode):
        kind = mode if mode in ("dist", "views") else "plain"
        net, trainer = nets[kind], trainers[kind]
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(batch)
        if mode == "lockstep":
            mx.nd.waitall()
            comm.Barrier()

    def block(mode, n):
        """(images/s of this rank over n steps of ``mode``, {thread kind: CPU ms per
        step}), both None where it does not train."""
        idle_barrier(comm)
        rate = cpu = None
        if mode != "one" or rank == 0:
            c0, t0 = common.thread_cpu(), time.perf_counter()
            for _ in range(n):
                step(mode)
            mx.nd.waitall()
            dt = time.perf_counter() - t0
            c1 = common.thread_cpu()
            rate = n * batch / dt
            cpu = dict.fromkeys(CPU_KINDS, 0.0)
            for tid, (_, seconds) in c1.items():
                kind = "main" if tid == os.getpid() else \
                    "library" if tid in library else "mxnet"
                cpu[kind] += (seconds - c0.get(tid, (None, 0.0))[1]) * 1000.0 / n
        idle_barrier(comm)
        return rate, cpu

    for mode in modes:
        block(mode, args.warmup)
    per_block = max(1, steps // args.blocks)
    rounds, cpu_rounds = [], []
    for r in range(args.blocks):
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        rates, cpus = {}, {}
        for mode in order:
            gathered = comm.gather(block(mode, per_block), root=0)
            if rank == 0:
                every = [rate for rate, _ in gathered]  # rank order: rank 0's first
                cpu_every = [cpu for _, cpu in gathered if cpu is not None]
                cpus[mode] = {k: sum(c[k] for c in cpu_every) / len(cpu_every)
                              for k in CPU_KINDS}
                if mode == "one":
                    rates[mode] = every[0]
                elif mode == "independent":
                    rates[mode] = sum(every)
                else:  # the slowest rank sets the pace of a synchronous job
                    rates[mode] = size * min(every)
        rounds.append(rates)
        cpu_rounds.append(cpus)
    hvd.shutdown()
    if rank != 0:
        return None
    return {"model": model, "ranks": size, "impl": args.impl, "batch": batch,
            "steps_per_block": per_block, "rounds": rounds, "cpu_rounds": cpu_rounds,
            "module": hvd.__file__}


def run_model(args, model):
    """One alternating run per library and configuration; returns {"model", "p", "runs":
    {label: result}}, label = the library, followed by the configuration unless default."""
    script = os.path.abspath(__file__)
    base = ["--worker", "--model", model, "--blocks", args.blocks, "--warmup", args.warmup,
            "--image-size", args.image_size, "--steps", steps_for(args, model),
            "--batch-size", batch_for(args, model)]
    out = {"model": model, "p": args.np, "runs": {}}
    for impl, config, python in common.runs(args):
        label = impl if config == "default" else "%s %s" % (impl, config)
        try:
            out["runs"][label] = common.launch(
                args.np, script, base + ["--impl", impl, "--config", config],
                python=python, env=common.CONFIGS[config], timeout=args.timeout)
        except RuntimeError as e:
            print("launch failed (%s): %s" % (label, e), file=sys.stderr)
            out["runs"][label] = {"error": common.error_summary(e)}
    return out


NAMES = {"one": "1 process", "independent": "{p} independent ranks",
         "lockstep": "{p} ranks in lockstep, no exchange", "dist": "{impl}",
         "views": "{impl} bucket views"}


def summarize(r):
    """Rows of one model's runs: per library, throughput of every mode and the per-round
    efficiency, ceiling and gaps (medians over rounds)."""
    p = r["p"]
    rows = []
    for label, res in r["runs"].items():
        impl = label.split()[0]
        if "error" in res:
            rows.append({"model": r["model"], "library": label, "run": impl, "ranks": p,
                         "error": res["error"]})
            continue
        rounds, cpu_rounds = res["rounds"], res.get("cpu_rounds") or []
        eff = {m: [x[m] / (p * x["one"]) for x in rounds] for m in rounds[0] if m != "one"}
        ceiling = eff.pop("independent")
        for mode in modes_for(impl):
            row = {"model": r["model"], "library": label,
                   "run": NAMES[mode].format(p=p, impl=impl),
                   "ranks": 1 if mode == "one" else p,
                   "images_per_s": stats([x[mode] for x in rounds])}
            if cpu_rounds:
                per = [x[mode] for x in cpu_rounds]
                row["cpu_ms_per_step"] = {k: stats([c[k] for c in per])["median"]
                                          for k in CPU_KINDS}
                row["cpu_ms_per_step"]["total"] = stats([sum(c.values()) for c in per])["median"]
            if mode == "independent":
                row["ceiling"] = stats(ceiling)["median"]
            elif mode != "one":
                e = eff[mode]
                row.update({"efficiency": stats(e)["median"],
                            "efficiency_range": [min(e), max(e)],
                            "ceiling": stats(ceiling)["median"],
                            "gap": stats([c - v for c, v in zip(ceiling, e)])["median"]})
                if mode != "lockstep":
                    row["lockstep_gap"] = stats([l - v for l, v in
                                                 zip(eff["lockstep"], e)])["median"]
            rows.append(row)
    return rows


def report(model_results):
    rows = [row for r in model_results for row in summarize(r)]

    def ips(s):
        return "%.1f (%.1f..%.1f)" % (s["median"], s["min"], s["max"]) if s["reps"] > 1 \
            else "%.1f" % s["median"]

    def num(r, k):
        return "%.3f" % r[k] if k in r else "-"
    common.print_table(
        ["model", "library", "run", "ranks", "images/s med (min..max)", "efficiency",
         "ceiling", "ceiling - efficiency", "lockstep - efficiency"],
        [[r["model"], r["library"], r["run"], r["ranks"],
          ips(r["images_per_s"]) if "images_per_s" in r else "failed: " + r["error"][:50],
          num(r, "efficiency"), num(r, "ceiling"), num(r, "gap"), num(r, "lockstep_gap")]
         for r in rows],
        title="training throughput, synthetic data, modes alternated block by block in one "
              "run per library; efficiency = images/s(p) / (p x images/s(1)), ceiling = the "
              "same for p independent ranks, lockstep = p ranks with a barrier per step and no "
              "exchange; efficiency, ceiling and gaps: medians of the per-round figures")
    cpu_rows = [r for r in rows if "cpu_ms_per_step" in r]
    if cpu_rows:
        common.print_table(
            ["model", "library", "run", "main thread", "MXNet's threads", "library threads",
             "total"],
            [[r["model"], r["library"], r["run"]] +
             ["%.2f" % r["cpu_ms_per_step"][k] for k in CPU_KINDS + ("total",)]
             for r in cpu_rows],
            title="CPU ms per training step per rank (mean over the ranks that train, median "
                  "over rounds): Python's thread, MXNet's engine and OpenMP threads, and the "
                  "threads MPI_Init and hvd.init() started (background thread); with as many "
                  "ranks as cores every CPU ms the library adds is taken from the model")
    rounds = {r["model"]: {impl: res.get("rounds") for impl, res in r["runs"].items()}
              for r in model_results}
    cpu_rounds = {r["model"]: {impl: res.get("cpu_rounds") for impl, res in r["runs"].items()}
                  for r in model_results}
    return common.emit("scaling", rows, rounds=rounds, cpu_rounds=cpu_rounds)


def main(argv=None):
    args = parse_args(argv)
    if common.in_rank(args, worker):
        return 0
    report([run_model(args, m) for m in args.models])
    return 0


if __name__ == "__main__":
    sys.exit(main())
