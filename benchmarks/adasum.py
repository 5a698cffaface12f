"""What an Adasum allreduce costs against a Sum allreduce of ResNet-50's gradients.

    python benchmarks/adasum.py                 # mpirun -np 2 (--np N for more ranks)
    python benchmarks/adasum.py --np 3

One step reduces the 161 weight gradients of ``resnet50_v1`` (102.2 MB float32, random
values; common.resnet50_gradient_shapes), one in-place ``hvd.allreduce_`` per tensor, then
``mx.nd.waitall()``: with ``op=hvd.Sum`` ("sum") and with ``op=hvd.Adasum`` ("adasum"),
timed in alternation (``common.timed_pair``: both see the same moments of a noisy
machine). Reported: the median (min..max) of each over --reps steps, and the ratio
adasum / sum. Where the extra time goes: a Sum ring sends 2(N-1)/N x the payload per rank
in pieces that all ranks reduce at once; Adasum's tree (docs/collectives.md) sends whole
vectors up ceil(log2 N) levels to the set's rank 0, one level after another, rank 0 doing
every level's float64 dot products, then broadcasts the result. The table gives the
levels and the bytes per rank of each.

Across hosts: ``benchmarks/cluster.py --modes default,adasum`` (capped links).
Horovod's MXNet binding refuses Adasum: no Horovod rows. Prints a table and one JSON line.
"""
import argparse
import math
import os

import common
from common import fmt_ms, ratio


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="timed steps per row")
    ap.add_argument("--limit", type=int, default=0, help="only the first N tensors")
    ap.add_argument("--quick", action="store_true", help="first 8 tensors, 2 steps")
    common.add_launch_args(ap, configs=("default",))
    args = ap.parse_args(argv)
    if args.quick:
        args.limit, args.reps = 8, 2
    args.no_horovod = True  # horovod.mxnet refuses Adasum
    return args


def worker(args):
    import mxnet as mx
    from mpi4py import MPI

    hvd = common.load_hvd(args.impl)
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    shapes = [s for _, s in common.resnet50_gradient_shapes(conv_biases=False)]
    if args.limit:
        shapes = shapes[:args.limit]
    hvd.init()
    mx.random.seed(hvd.rank())
    arrays = [mx.nd.random.normal(shape=s) for s in shapes]

    def step(op, tag):
        def run():
            for i, a in enumerate(arrays):
                hvd.allreduce_(a, op=op, name="adasum_bench.%s.%d" % (tag, i))
            mx.nd.waitall()
        return run

    sums, adasums = common.timed_pair(step(hvd.Sum, "sum"), step(hvd.Adasum, "adasum"),
                                      args.reps, barrier=comm.Barrier)
    hvd.shutdown()
    if comm.Get_rank() != 0:
        return None
    levels = max(1, math.ceil(math.log2(p)))
    payload = sum(4 * int(math.prod(s)) for s in shapes)
    return {"ranks": p, "tensors": len(shapes), "bytes": payload, "sum": sums,
            "adasum": adasums, "levels": levels,
            "ring_bytes_per_rank": 2 * (p - 1) * payload // p,
            # up the tree: each rank but 0 sends its vector once; then the broadcast
            "tree_bytes_to_rank0": levels * payload}


def report(results):
    rows = []
    for res in results:
        if "error" in res:
            continue
        rows.append({"config": res["config"], "ranks": res["ranks"], "tensors": res["tensors"],
                     "bytes": res["bytes"], "sum_s": res["sum"], "adasum_s": res["adasum"],
                     "ratio": ratio(res["adasum"], res["sum"]), "levels": res["levels"],
                     "ring_bytes_per_rank": res["ring_bytes_per_rank"],
                     "tree_bytes_to_rank0": res["tree_bytes_to_rank0"]})
    common.print_table(
        ["ranks", "tensors", "MB", "sum ms", "adasum ms", "adasum / sum", "tree levels",
         "ring MB per rank", "tree MB into rank 0"],
        [[r["ranks"], r["tensors"], "%.1f" % (r["bytes"] / 1e6), fmt_ms(r["sum_s"], 1),
          fmt_ms(r["adasum_s"], 1), "%.2f" % r["ratio"], r["levels"],
          "%.1f" % (r["ring_bytes_per_rank"] / 1e6),
          "%.1f" % (r["tree_bytes_to_rank0"] / 1e6)] for r in rows],
        title="ResNet-50's gradients, one allreduce_ per tensor, Sum and Adasum alternated")
    common.print_failures(results)
    return common.emit("adasum", rows, errors=common.errors_of(results))


def main(argv=None):
    args = parse_args(argv)
    return common.run_script(args, worker, report, os.path.abspath(__file__),
                             ["--reps", args.reps, "--limit", args.limit])


if __name__ == "__main__":
    main()
