"""What the mean costs on a large in-place allreduce: Sum against Average.

    OMP_NUM_THREADS=1 .venv/bin/mpirun -np 2 .venv/bin/python benchmarks/average_cost.py

Reduces the ResNet-50 gradient volume (25.5 M float32, 102 MB) held in four flat buffers
of about 25 MiB (the buckets of ``gradient_as_bucket_view`` at the default 25 MiB cap) with
one in-place ``hvd.allreduce_`` each, op=Sum and op=Average, beside the floor measured in
the same mpirun: mpi4py's ``comm.Allreduce`` over one flat numpy buffer in 16 MiB slices.
Average divides after the sum, one more pass over every element (MPI has no "sum then
divide" operation); Horovod's DistributedTrainer avoids that pass by summing and folding
1/size into the optimizer's rescale_grad. Prints median (min..max) ms over --reps steps,
the ratios, and one JSON line. Launch it with mpirun yourself (it does not start one).
"""
import argparse
import json
import time

import mxnet as mx
import numpy as np
from mpi4py import MPI

import mxhorovod as hvd

TOTAL = 25_557_032  # float32 elements of resnet50_v1's 161 weight gradients


def timed(fn, reps, comm):
    fn()
    times = []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"median": float(np.median(times)), "min": min(times), "max": max(times)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    flat = np.zeros(TOTAL, np.float32)
    per_slice = (16 << 20) // 4

    def floor():
        for off in range(0, TOTAL, per_slice):
            comm.Allreduce(MPI.IN_PLACE, flat[off:off + per_slice], op=MPI.SUM)
    rows = {"floor_sliced_16MiB": timed(floor, args.reps, comm)}
    hvd.init()
    bucket = (25 << 20) // 4
    sizes = [bucket] * (TOTAL // bucket) + ([TOTAL % bucket] if TOTAL % bucket else [])
    bufs = [mx.nd.zeros((s,)) for s in sizes]
    for label, op in (("sum", hvd.Sum), ("average", hvd.Average)):
        def step(op=op):
            for i, b in enumerate(bufs):
                hvd.allreduce_(b, op=op, name="average_cost.%d" % i)
            mx.nd.waitall()
        rows[label] = timed(step, args.reps, comm)
    hvd.shutdown()
    if comm.Get_rank() == 0:
        f = rows["floor_sliced_16MiB"]["median"]
        for k, v in rows.items():
            print("%-20s %8.2f (%.2f..%.2f) ms  ratio to floor %.2f"
                  % (k, v["median"] * 1e3, v["min"] * 1e3, v["max"] * 1e3, v["median"] / f))
        print(json.dumps({"benchmark": "average_cost", "ranks": comm.Get_size(),
                          "buffers": len(sizes), "rows": rows}))


if __name__ == "__main__":
    main()
