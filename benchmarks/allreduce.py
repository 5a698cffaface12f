"""Allreduce bus bandwidth of single tensors, beside mpi4py's Allreduce in the same mpirun.

    python benchmarks/allreduce.py            # launches mpirun -np 2 once per configuration
    OMP_NUM_THREADS=1 mpirun -np 2 python benchmarks/allreduce.py   # this environment only

For each size from --min-bytes to --max-bytes (x4 steps; 4 KiB to 256 MiB), the median
(min, max) time of in-place float32 Sum allreduces of one tensor, one at a time, each
waited for (end to end: the call, the engine, negotiation, MPI, completion), through
``hvd.allreduce_`` and through ``comm.Allreduce`` on a numpy array of the same size, in
the same mpirun (mpi4py before ``hvd.init()``, so the library's background thread cannot
slow the floor; again after it, column "mpi4py after init"). busbw = 2(p-1)/p x bytes / time (nccl-tests' convention); ratio = the
library's median time over mpi4py's (1.0 = no overhead). Started with plain ``python``, the
script runs each configuration (default, HOROVOD_FUSION_THRESHOLD=0,
HOROVOD_CACHE_CAPACITY=0) and, when horovod.mxnet is importable (--horovod-python), the
same rows for Horovod. Prints a table and one JSON line.
"""
import argparse
import os
import sys

import common
from common import MiB, busbw, fmt_ms, ratio, timed


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-bytes", type=int, default=4 << 10)
    ap.add_argument("--max-bytes", type=int, default=256 * MiB)
    ap.add_argument("--reps", type=int, default=20, help="timed runs per size (fewer above "
                    "64 MiB: at most 2 GB moved per size)")
    ap.add_argument("--quick", action="store_true", help="4 KiB and 64 KiB, 2 runs each, "
                    "default configuration only (the smoke test)")
    common.add_launch_args(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.max_bytes, args.reps = min(args.max_bytes, 64 << 10), 2
        args.configs = ["default"]
    if args.min_bytes < 4 or args.max_bytes < args.min_bytes:
        ap.error("need 4 <= --min-bytes <= --max-bytes")
    return args


def worker(args):
    """One rank: the sweep; rank 0 returns the result (other ranks None)."""
    import mxnet as mx
    import numpy as np
    from mpi4py import MPI

    hvd = common.load_hvd(args.impl)
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    sizes = []
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        sizes.append(nbytes)
        nbytes *= 4

    def reps_for(nbytes):
        return max(3 if not args.quick else 1, min(args.reps, int(2e9 // nbytes)))

    def floor(nbytes):
        buf = np.zeros(nbytes // 4, dtype=np.float32)
        return timed(lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM), reps_for(nbytes),
                     barrier=comm.Barrier)

    # The floor first, before init(): a background thread that holds MPI's lock or polls
    # would slow mpi4py's calls too and flatter the ratio. Measured again after init()
    # ("mpi4py_during_s"), which shows that interference.
    before = {n: floor(n) for n in sizes}
    hvd.init()
    rows = []
    for nbytes in sizes:
        x = mx.nd.ones((nbytes // 4,))
        name = "bench.%d" % nbytes

        def ours():
            hvd.allreduce_(x, op=hvd.Sum, name=name)
            x.wait_to_read()

        # One checked run: every rank must hold p (a broken setup must not time nonsense).
        ours()
        got = float(x[0].asscalar())
        if got != p:
            raise SystemExit("allreduce of ones over %d ranks gave %s" % (p, got))
        x[:] = 0  # sums of zeros never overflow
        t_ours = timed(ours, reps_for(nbytes), barrier=comm.Barrier)
        t_mpi = before[nbytes]
        rows.append({"bytes": nbytes, "time_s": t_ours, "mpi4py_s": t_mpi,
                     "mpi4py_during_s": floor(nbytes),
                     "busbw_GBps": busbw(nbytes, t_ours["median"], p),
                     "busbw_mpi4py_GBps": busbw(nbytes, t_mpi["median"], p),
                     "ratio": ratio(t_ours, t_mpi)})
        x = None  # free it before the next size
    result = {"ranks": p, "rows": rows, "module": hvd.__file__} if hvd.rank() == 0 else None
    hvd.shutdown()
    return result


def report(results):
    table = []
    for res in results:
        for r in res.get("rows", []):
            table.append([common.label(res), r["bytes"], fmt_ms(r["time_s"]),
                          fmt_ms(r["mpi4py_s"]), fmt_ms(r["mpi4py_during_s"]),
                          "%.2f" % r["busbw_GBps"],
                          "%.2f" % r["busbw_mpi4py_GBps"], "%.2f" % r["ratio"]])
    ranks = next((r["ranks"] for r in results if "ranks" in r), None)
    common.print_table(
        ["run", "bytes", "time ms med (min..max)", "mpi4py ms med (min..max)",
         "mpi4py after init", "busbw GB/s", "mpi4py GB/s", "ratio"], table,
        title="allreduce of one float32 tensor, %s ranks; ratio = time / mpi4py time "
              "(same mpirun)" % ranks)
    common.print_failures(results)
    rows = [dict(r, impl=res["impl"], config=res["config"]) for res in results
            for r in res.get("rows", [])]
    return common.emit("allreduce", rows, ranks=ranks, errors=common.errors_of(results))


def main(argv=None):
    args = parse_args(argv)
    return common.run_script(args, worker, report, os.path.abspath(__file__),
                             ["--min-bytes", args.min_bytes, "--max-bytes", args.max_bytes,
                              "--reps", args.reps])


if __name__ == "__main__":
    sys.exit(main())
