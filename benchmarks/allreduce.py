"""Allreduce bus bandwidth of mxhorovod against the raw-MPI floor, in the same mpirun.

    OMP_NUM_THREADS=1 .venv/bin/mpirun -np 2 .venv/bin/python benchmarks/allreduce.py

For each size, the median (min, max) time of `reps` in-place float32 Sum allreduces, one at
a time (each waited for), through hvd.allreduce_ and through mpi4py's comm.Allreduce on a
numpy array of the same size; busbw = 2(p-1)/p x bytes / time (nccl-tests' convention).
The ratio column is mxhorovod's time over the floor's (1.0 = no overhead). Rank 0 prints a
table and one JSON line.
"""
import argparse
import json
import time

import mxnet as mx
import numpy as np
from mpi4py import MPI

import mxhorovod as hvd


def timed(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), float(np.min(times)), float(np.max(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-bytes", type=int, default=4 << 10)
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    hvd.init()
    comm = MPI.COMM_WORLD
    p = hvd.size()
    rows = []
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        n = nbytes // 4
        reps = max(3, min(args.reps, int(2e9 // max(nbytes, 1))))
        x = mx.nd.ones((n,))
        buf = np.ones(n, dtype=np.float32)

        def ours():
            hvd.allreduce_(x, op=hvd.Sum, name="bench.%d" % nbytes)
            x.wait_to_read()

        def floor():
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

        ours(), floor()  # warm-up (negotiation, cache, buffers)
        comm.Barrier()
        t_ours = timed(ours, reps)
        comm.Barrier()
        t_floor = timed(floor, reps)
        factor = 2.0 * (p - 1) / p if p > 1 else 1.0
        rows.append({"bytes": nbytes, "mxhorovod_s": t_ours, "mpi4py_s": t_floor,
                     "busbw_mxhorovod_GBps": factor * nbytes / t_ours[0] / 1e9,
                     "busbw_mpi4py_GBps": factor * nbytes / t_floor[0] / 1e9,
                     "ratio": t_ours[0] / t_floor[0]})
        nbytes *= 4
    if hvd.rank() == 0:
        print("ranks=%d  median (min..max) per allreduce; busbw in GB/s" % p)
        print("%12s %26s %26s %9s %9s %7s" % ("bytes", "mxhorovod ms", "mpi4py ms", "bw ours",
                                             "bw mpi", "ratio"))
        for r in rows:
            f = lambda t: "%8.3f (%6.3f..%7.3f)" % tuple(v * 1e3 for v in t)
            print("%12d %26s %26s %9.2f %9.2f %7.2f" % (r["bytes"], f(r["mxhorovod_s"]),
                  f(r["mpi4py_s"]), r["busbw_mxhorovod_GBps"], r["busbw_mpi4py_GBps"], r["ratio"]))
        print(json.dumps({"benchmark": "allreduce", "ranks": p, "rows": rows}))
    hvd.shutdown()


if __name__ == "__main__":
    main()
