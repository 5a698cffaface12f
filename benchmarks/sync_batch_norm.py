"""What hvd.SyncBatchNorm costs: a ResNet-50 training step with it against gluon.nn.BatchNorm.

    python benchmarks/sync_batch_norm.py                      # one host, 2 ranks
    sudo python benchmarks/sync_batch_norm.py --hosts [--rates 1gbit,100mbit]
    python benchmarks/sync_batch_norm.py --quick              # the smoke test

Model: GluonCV's ``resnet50_v1b(pretrained=False, norm_layer=...)``, once with
``gluon.nn.BatchNorm`` ("bn") and once with ``hvd.SyncBatchNorm`` ("syncbn"), both built
up front in every rank (the same order on every rank, so the same layer names), hybridized,
each with its own ``hvd.DistributedTrainer`` (SGD, momentum 0.9), on synthetic data (random
images and labels, ``--batch`` per rank, 3 x --image-size^2, 1000 classes). Nothing is
downloaded (``pretrained=False``; ``MXNET_HOME`` is a temporary folder). One OpenMP thread
and one engine worker per rank unless set.

After ``--warmup`` steps of each variant, the two variants run **in alternation, block by
block** (a block: ``--steps`` steps of one variant, each ended by ``mx.nd.waitall()``; the
ranks start each block together at an MPI barrier; the starting variant alternates from
round to round), so both see the same moments of a noisy machine. Per block: the step time
(block time / steps, the slowest rank's). Reported: per variant the median (min..max) over
the --blocks rounds; the ratio syncbn / bn of the medians and the median (min..max) of the
per-round ratios (the floor, BatchNorm, is measured in the same job); the number of
SyncBatchNorm layers (each makes 2 collectives per training step: a grouped allreduce in
forward, an allreduce in backward, about 3 numbers per channel) and whether MXNet's MKLDNN
kernels ran (then each SyncBatchNorm also multiplies its input and output by ones, to get
plain layouts around its custom operator: part of the cost measured).

Modes: one host, ``--np`` ranks under the venv's mpirun (default); ``--hosts``: 2 hosts
made of network namespaces (devtools/mxhorovod_devtools/netns_hosts.py, as root), one rank
each, each host's eth0 capped at each of ``--rates`` in turn (tc's syntax, ``1gbit``,
``100mbit``; ``tc tbf`` as benchmarks/cluster.py), MPICH and UCX over TCP on eth0.
``--quick``: 16 x 16 images, 1 warm-up step, 1 round of 1 step (the smoke test).
Prints a table per job (the machine and the command above it) and one JSON line.
Horovod's MXNet binding has no SyncBatchNorm: no Horovod rows (``--no-horovod`` is
accepted for the smoke test's sake and changes nothing).
"""
import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

import common
from common import stats

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("bn", "syncbn")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=2, help="ranks on one host (default 2)")
    ap.add_argument("--batch", type=int, default=2, help="images per rank (default 2)")
    ap.add_argument("--image-size", type=int, default=112, help="default 112")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps of each variant")
    ap.add_argument("--blocks", type=int, default=8, help="rounds (one block of each variant)")
    ap.add_argument("--steps", type=int, default=3, help="steps per block")
    ap.add_argument("--hosts", action="store_true",
                    help="2 namespace hosts, one rank each, capped links (root)")
    ap.add_argument("--rates", default="1gbit",
                    help="with --hosts: comma-separated caps, one job each (default 1gbit; "
                         "at 100mbit ResNet-50's 100 MB of gradients take ~8 s a step)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per job")
    ap.add_argument("--quick", action="store_true", help="smoke test: tiny images, 2 steps")
    ap.add_argument("--no-horovod", action="store_true", help="accepted; no Horovod rows anyway")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.image_size, args.warmup, args.blocks, args.steps = 16, 1, 1, 1
    args.rates = [r for r in args.rates.split(",") if r]
    return args


def worker_args(args):
    return ["--worker", "--batch", args.batch, "--image-size", args.image_size,
            "--warmup", args.warmup, "--blocks", args.blocks, "--steps", args.steps]


# -- inside a rank ----------------------------------------------------------------------------

def count_layers(block, cls):
    n = 1 if isinstance(block, cls) else 0
    return n + sum(count_layers(c, cls) for c in block._children.values())


def worker(args):
    import mxnet as mx
    from mpi4py import MPI
    from mxnet import autograd, gluon
    from gluoncv.model_zoo import resnet50_v1b

    import mxhorovod as hvd
    from mxhorovod.collectives.submit import MKLDNN

    comm = MPI.COMM_WORLD
    hvd.init()
    rank = hvd.rank()
    mx.random.seed(1 + rank)
    shape = (args.batch, 3, args.image_size, args.image_size)
    x = mx.nd.random.uniform(shape=shape)
    y = mx.nd.array([(rank * args.batch + i) % 1000 for i in range(args.batch)])
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    nets, trainers = {}, {}
    for v in VARIANTS:  # both up front, in the same order on every rank
        norm = hvd.SyncBatchNorm if v == "syncbn" else gluon.nn.BatchNorm
        net = resnet50_v1b(pretrained=False, norm_layer=norm, prefix="%s_resnet_" % v)
        net.initialize(mx.init.Xavier(), ctx=mx.cpu())
        net.hybridize()
        nets[v] = net
    layers = count_layers(nets["syncbn"], hvd.SyncBatchNorm)

    def step(v):
        with autograd.record():
            loss = loss_fn(nets[v](x), y)
        loss.backward()
        trainers[v].step(args.batch)
        mx.nd.waitall()

    for v in VARIANTS:
        with autograd.record():  # shapes final (deferred init) before the trainer
            nets[v](x)
        mx.nd.waitall()
        trainers[v] = hvd.DistributedTrainer(nets[v].collect_params(), "sgd",
                                             {"learning_rate": 0.01, "momentum": 0.9},
                                             prefix="sbn.%s." % v)
        for _ in range(args.warmup):
            step(v)
    per_step = {v: [] for v in VARIANTS}
    for r in range(args.blocks):
        for v in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step(v)
            t = (time.perf_counter() - t0) / args.steps
            per_step[v].append(comm.allreduce(t, op=MPI.MAX))
    hosts = len(set(comm.allgather(socket.gethostname())))
    hvd.shutdown()
    if rank != 0:
        return None
    return {"ranks": comm.Get_size(), "hosts": hosts,
            "layers": layers, "collectives_per_step": 2 * layers, "mkldnn": MKLDNN,
            "batch": args.batch, "image_size": args.image_size, "steps": args.steps,
            "blocks": args.blocks, "warmup": args.warmup, "per_step_s": per_step}


# -- the launching process --------------------------------------------------------------------

def summarize(res, setting):
    bn, sb = res["per_step_s"]["bn"], res["per_step_s"]["syncbn"]
    rounds = [s / b for b, s in zip(bn, sb)]
    return {"setting": setting, "ranks": res["ranks"], "hosts": res["hosts"], "layers": res["layers"],
            "collectives_per_step": res["collectives_per_step"], "mkldnn": res["mkldnn"],
            "batch": res["batch"], "image_size": res["image_size"],
            "bn_s": stats(bn), "syncbn_s": stats(sb),
            "ratio": statistics.median(sb) / statistics.median(bn),
            "round_ratio": stats(rounds),
            "extra_ms_per_collective": (statistics.median(sb) - statistics.median(bn)) * 1e3
            / res["collectives_per_step"]}


def mpirun_env():
    env = common.rank_env()
    env.setdefault("MXNET_HOME", tempfile.mkdtemp(prefix="sbn_mxnet_home"))
    return env


def run_one_host(args):
    cmd = common.mpirun_cmd(args.np, sys.executable, os.path.abspath(__file__),
                            worker_args(args))
    env = mpirun_env()
    try:
        out, = common.finish([common.start(cmd, env)], args.timeout, " ".join(cmd))
    finally:
        shutil.rmtree(env["MXNET_HOME"], ignore_errors=True)
    res = common.results_of(out)
    if not res:
        raise RuntimeError("no result\n" + out[-4000:])
    return summarize(res[0], "1 host, %d ranks" % args.np)


def run_hosts(args, rate):
    from mxhorovod_devtools.netns_hosts import NetnsHosts
    env = mpirun_env()
    env.update(NetnsHosts.network_env(within_host_tcp=False))
    argv = ["-genvall", sys.executable, os.path.abspath(__file__)] + [str(a) for a in worker_args(args)]
    try:
        with NetnsHosts(2) as hosts:
            hosts.limit_rate(rate)
            cmd = hosts.mpirun_cmd(hosts.hosts, argv, ppn=1)
            proc = hosts.run_cmd(cmd, timeout=args.timeout, env=env)
    finally:
        shutil.rmtree(env["MXNET_HOME"], ignore_errors=True)
    res = common.results_of(proc.stdout)
    if proc.returncode != 0 or not res:
        raise RuntimeError("job failed (exit %s)\n%s" % (proc.returncode, proc.stdout[-4000:]))
    return summarize(res[0], "2 hosts x 1 rank, eth0 capped at %s" % rate)


def report(rows, errors):
    m = common.machine()
    print("machine: %s, %d CPUs, load %s at start, %s now; command: %s"
          % (m["host"], m["cpus"], m["loadavg_start"], m["loadavg"],
             " ".join([os.path.relpath(sys.executable)] + sys.argv)))
    if rows:
        r0 = rows[0]
        print("ResNet-50 v1b (GluonCV), batch %d x 3 x %d x %d per rank, %d SyncBatchNorm "
              "layers = %d collectives per step, MKLDNN %s; step ms: median (min..max) over "
              "rounds; ratio = syncbn median / bn median; per round: median (min..max) of "
              "each round's ratio" % (r0["batch"], r0["image_size"], r0["image_size"],
                                      r0["layers"], r0["collectives_per_step"],
                                      "on" if r0["mkldnn"] else "off"))
    common.print_table(
        ["setting", "BatchNorm ms", "SyncBatchNorm ms", "ratio", "per round", "extra ms/coll."],
        [[r["setting"], common.fmt_ms(r["bn_s"], 1), common.fmt_ms(r["syncbn_s"], 1),
          "%.2f" % r["ratio"],
          "%.2f (%.2f..%.2f)" % (r["round_ratio"]["median"], r["round_ratio"]["min"],
                                 r["round_ratio"]["max"]),
          "%.2f" % r["extra_ms_per_collective"]] for r in rows])
    for e in errors:
        print("error: " + e)
    common.emit("sync_batch_norm", rows, errors=errors)


def main(argv=None):
    args = parse_args(argv)
    if common.in_rank(args, worker):
        return 0
    rows, errors = [], []
    jobs = [(run_hosts, rate) for rate in args.rates] if args.hosts else [(run_one_host, None)]
    for fn, rate in jobs:
        try:
            rows.append(fn(args, rate) if rate else fn(args))
        except (RuntimeError, AssertionError) as e:
            errors.append(common.error_summary(e))
            print(str(e)[-3000:], file=sys.stderr)
    report(rows, errors)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
