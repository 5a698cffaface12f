"""Large-batch MNIST: averaged gradients with a linearly scaled learning rate against Adasum.

    python benchmarks/adasum_mnist.py            # 4 ranks, batch 512 per rank, 3 seeds
    python benchmarks/adasum_mnist.py --quick    # the smoke test

Runs ``examples/mxnet_mnist.py`` under the venv's mpirun, ``--np`` ranks of ``--batch``
samples each (global batch np x batch), SGD with momentum 0.9, for each seed of --seeds:

- **average**: ``--op average``, the example's learning rate ``--base-lr`` (for its batch
  64) scaled linearly to the per-rank batch and by the number of ranks (the example
  multiplies by the size): ``base_lr * batch / 64 * np``, Goyal et al.'s rule;
- **adasum**: ``--op adasum`` with the learning rate of one process on the per-rank batch,
  ``base_lr * batch / 64``, as Horovod's Adasum guide recommends (Adasum combines the
  ranks' steps, it does not scale them: docs/adasum_user_guide.rst);
- **average-unscaled** (a control, in --ops only when named): ``--op average`` with
  Adasum's learning rate, ``base_lr * batch / 64``, not scaled by the number of ranks.

Each run stops after the first epoch whose test accuracy reaches --target (or after
--epochs). Reported per op: the epochs and the wall seconds (training and evaluation, as the
example prints them) to reach the target, per seed and their median, and the final
accuracy. One OpenMP thread per rank. Prints a table and one JSON line.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=4, help="ranks")
    ap.add_argument("--batch", type=int, default=512, help="samples per rank per step")
    ap.add_argument("--base-lr", type=float, default=0.01, help="the example's lr at batch 64")
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated seeds")
    ap.add_argument("--epochs", type=int, default=8, help="the most epochs per run")
    ap.add_argument("--target", type=float, default=0.98, help="test accuracy to reach")
    ap.add_argument("--ops", default="average,adasum",
                    help="comma-separated: average, adasum, average-unscaled")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    ap.add_argument("--quick", action="store_true",
                    help="2 ranks, 1 seed, 1 epoch of 2,560 images (the smoke test)")
    ap.add_argument("--no-horovod", action="store_true", help=argparse.SUPPRESS)  # smoke test
    args = ap.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    args.ops = [o for o in args.ops.split(",") if o]
    args.limit = []
    if args.quick:
        args.np, args.batch, args.seeds, args.epochs = 2, 64, [1], 1
        args.limit = ["--train-limit", "2560", "--test-limit", "500"]
    return args


def run(args, op, seed):
    lr = args.base_lr * args.batch / 64.0  # per rank; the example scales it for average
    given = lr / args.np if op == "average-unscaled" else lr  # undoes the example's scaling
    cmd = [os.path.join(os.path.dirname(sys.executable), "mpirun"), "-np", str(args.np),
           sys.executable, os.path.join(ROOT, "examples", "mxnet_mnist.py"),
           "--op", "adasum" if op == "adasum" else "average", "--batch-size", str(args.batch),
           "--lr", repr(given), "--seed", str(seed),
           "--epochs", str(args.epochs), "--target-accuracy", repr(args.target)] + args.limit
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=args.timeout).stdout
    epochs = [(int(m.group(1)), float(m.group(2)))
              for m in re.finditer(r"^epoch (\d+): .*test accuracy ([0-9.]+)", out, re.M)]
    reached = re.search(r"after epoch (\d+), ([0-9.]+) s of training", out)
    if not epochs:
        raise RuntimeError("%s seed %d: no epoch line\n%s" % (op, seed, out[-3000:]))
    return {"op": op, "seed": seed, "lr": lr * (args.np if op == "average" else 1),
            "accuracy": epochs[-1][1], "epochs_run": epochs[-1][0],
            "epochs_to_target": int(reached.group(1)) if reached else None,
            "seconds_to_target": float(reached.group(2)) if reached else None}


def main(argv=None):
    args = parse_args(argv)
    runs = [run(args, op, seed) for seed in args.seeds for op in args.ops]  # ops alternate
    rows = []
    for op in args.ops:
        mine = [r for r in runs if r["op"] == op]
        hit = [r for r in mine if r["epochs_to_target"] is not None]
        rows.append({"op": op, "lr": mine[0]["lr"], "runs": mine,
                     "reached": "%d of %d" % (len(hit), len(mine)),
                     "median_epochs": statistics.median(r["epochs_to_target"] for r in hit)
                     if hit else None,
                     "median_seconds": statistics.median(r["seconds_to_target"] for r in hit)
                     if hit else None})

    def per_seed(r, key, fmt):
        return ", ".join("-" if x[key] is None else fmt % x[key] for x in r["runs"])
    common.print_table(
        ["op", "lr", "reached %g" % args.target, "epochs (per seed)", "median epochs",
         "seconds (per seed)", "median s", "final accuracy (per seed)"],
        [[r["op"], "%g" % r["lr"], r["reached"], per_seed(r, "epochs_to_target", "%d"),
          "-" if r["median_epochs"] is None else "%g" % r["median_epochs"],
          per_seed(r, "seconds_to_target", "%.0f"),
          "-" if r["median_seconds"] is None else "%.0f" % r["median_seconds"],
          per_seed(r, "accuracy", "%.4f")] for r in rows],
        title="MNIST, %d ranks x batch %d (global %d), SGD momentum 0.9"
              % (args.np, args.batch, args.np * args.batch))
    return common.emit("adasum_mnist", rows, ranks=args.np, batch=args.batch,
                       target=args.target, errors=[])


if __name__ == "__main__":
    main()
