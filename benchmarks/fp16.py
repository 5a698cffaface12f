"""float16 at memory speed: the reduction kernel alone, and allreduce_ of float16 against float32.

    python benchmarks/fp16.py     # kernel rows in this process, then mpirun -np 2 per path

Kernel rows (this process, no MPI): the float16 Sum kernel that MPI's reduction and the
cross-memory-attach allreduce call (src/ops/float16.h: inout = h(f(in) + f(inout))), on
--kernel-sizes elements, on each path this CPU has (avx2, portable), timed in alternation
with two floors over the same buffers: "stream", numpy's bitwise_or of the two buffers as
uint64 into the second (the kernel's memory traffic: read 2 x 2n bytes, write 2n, no
arithmetic), and "memcpy" (np.copyto of 2n bytes). ratio = kernel / stream floor; GB/s =
the kernel's 6n bytes / time.

Cast rows (this process, MXNet's engine): the casts that Compression.fp16 in
DistributedTrainer makes of each gradient, float32 -> float16 and back, on --kernel-sizes
elements, by mxhorovod's engine operation (F16C kernels) and by mx.nd.cast(out=), each
followed by wait_to_read, in alternation with the "memcpy" floor of the float32 buffer
(np.copyto of 4n bytes: more traffic than a cast's 6n bytes read and written, fewer
passes). ratio = mxhorovod / mx.nd.cast.

Allreduce rows (mpirun -np --np, once per --simd value given as MXHOROVOD_SIMD): one
in-place ``hvd.allreduce_`` of --sizes elements in float16 and in float32, with the
default op (Average) and with Sum, the four timed in alternation (ranks lined up by an
MPI barrier before each), then ``wait_to_read``. ratio = float16 / float32 (the target: at
most 1). Figures are the median (min..max) over --reps. Prints the tables and one JSON line.
"""
import argparse
import ctypes
import os
import sys
import time

import common
from common import fmt_ms, stats

SUM = 0  # kernel numbers of mxhorovod_float16_kernel (src/ops/float16.h)
PATHS = {"portable": 0, "avx2": 1}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="431000,4194304",
                    help="elements per allreduce_, comma-separated (default 431000,4194304)")
    ap.add_argument("--kernel-sizes", default="131072,431000,16777216",
                    help="elements per kernel call, comma-separated (empty: no kernel rows)")
    ap.add_argument("--reps", type=int, default=30, help="timed runs per row (default 30)")
    ap.add_argument("--simd", default="auto,portable",
                    help="MXHOROVOD_SIMD values, one mpirun each (default auto,portable)")
    ap.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per launch")
    ap.add_argument("--quick", action="store_true",
                    help="4097 elements, 3 runs, the first --simd value only (smoke test)")
    ap.add_argument("--no-horovod", action="store_true", help=argparse.SUPPRESS)  # no rows
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.kernel_sizes = [int(s) for s in args.kernel_sizes.split(",") if s]
    args.simd = [s for s in args.simd.split(",") if s]
    if args.quick:
        args.sizes, args.kernel_sizes, args.reps, args.simd = [4097], [4097], 3, args.simd[:1]
    if args.reps < 1 or not args.sizes or min(args.sizes + args.kernel_sizes) < 1:
        ap.error("need --reps >= 1 and sizes >= 1")
    return args


def round_robin(fns, reps, barrier=None):
    """Each of ``fns`` once untimed, then ``reps`` rounds of each in turn (a, b, c, a, ...),
    so all see the same drift of a noisy machine; :func:`common.stats` of each, seconds."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, out in zip(fns, times):
            if barrier is not None:
                barrier()
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return [stats(t) for t in times]


# ---------------------------------------------------------------- the kernel alone


def kernel_rows(args):
    import numpy as np
    from mxhorovod import _core
    if not args.kernel_sizes:
        return []
    try:
        fn = ctypes.CDLL(_core.__file__).mxhorovod_float16_kernel
    except AttributeError:  # a build from before the kernels (allreduce rows still run)
        print("no kernel rows: %s has no mxhorovod_float16_kernel" % _core.__file__)
        return []
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_int64, ctypes.c_double]
    fn.restype = ctypes.c_int
    rows = []
    for n in args.kernel_sizes:
        n8 = (n + 3) // 4 * 4  # whole uint64 words for the floor
        rng = np.random.default_rng(0)
        a = rng.standard_normal(n8).astype(np.float16)
        b = np.zeros(n8, np.float16)  # 0 + a, then 2a, ...: no overflow in 30 runs
        # The floors on buffers of their own: the kernel's values stay numbers.
        x64, y64 = np.zeros(n8 // 4, np.uint64), np.ones(n8 // 4, np.uint64)
        src, dst = np.zeros(n8, np.float16), np.zeros(n8, np.float16)
        fns, names = [], []
        for path, code in PATHS.items():
            if fn(code, SUM, a.ctypes.data, b.ctypes.data, 0, 1.0) != 0:
                continue  # this CPU cannot run it
            fns.append(lambda code=code: fn(code, SUM, a.ctypes.data, b.ctypes.data, n, 1.0))
            names.append(path)
        fns += [lambda: np.bitwise_or(x64, y64, out=y64), lambda: np.copyto(dst, src)]
        measured = dict(zip(names + ["stream", "memcpy"], round_robin(fns, args.reps)))
        for path in names:
            t = measured[path]
            rows.append({"what": "kernel", "path": path, "elements": n, "time_s": t,
                         "stream_s": measured["stream"], "memcpy_s": measured["memcpy"],
                         "ratio": common.ratio(t, measured["stream"]),
                         "GBps": 6.0 * n / t["median"] / 1e9})
    common.print_table(
        ["path", "elements", "kernel ms med (min..max)", "GB/s", "stream floor ms",
         "memcpy ms", "ratio"],
        [[r["path"], r["elements"], fmt_ms(r["time_s"]), "%.1f" % r["GBps"], fmt_ms(r["stream_s"]),
          fmt_ms(r["memcpy_s"]), "%.2f" % r["ratio"]] for r in rows],
        title="float16 Sum kernel alone; ratio = kernel / stream floor (same loop)")
    return rows


def cast_rows(args):
    import mxnet as mx
    import numpy as np
    from mxhorovod.training.compression import _cast
    rows = []
    for n in args.kernel_sizes:
        f32 = mx.nd.array(np.random.default_rng(1).standard_normal(n), dtype=np.float32)
        f16 = mx.nd.empty((n,), dtype=np.float16)
        back = mx.nd.empty((n,), dtype=np.float32)
        src, dst = np.zeros(n, np.float32), np.zeros(n, np.float32)

        def run(fn, out):
            def step():
                fn()
                out.wait_to_read()
            return step
        fns = [run(lambda: _cast(f32, f16, True), f16),
               run(lambda: mx.nd.cast(f32, dtype="float16", out=f16), f16),
               run(lambda: _cast(f16, back, True), back),
               run(lambda: mx.nd.cast(f16, dtype="float32", out=back), back),
               lambda: np.copyto(dst, src)]
        ours16, mx16, ours32, mx32, floor = round_robin(fns, args.reps)
        for direction, ours, theirs in (("float32->float16", ours16, mx16),
                                        ("float16->float32", ours32, mx32)):
            rows.append({"what": "cast", "direction": direction, "elements": n,
                         "time_s": ours, "mxnet_s": theirs, "memcpy_s": floor,
                         "ratio": common.ratio(ours, theirs)})
    common.print_table(
        ["cast", "elements", "mxhorovod ms med (min..max)", "mx.nd.cast ms", "memcpy floor ms",
         "ratio"],
        [[r["direction"], r["elements"], fmt_ms(r["time_s"]), fmt_ms(r["mxnet_s"]),
          fmt_ms(r["memcpy_s"]), "%.2f" % r["ratio"]] for r in rows],
        title="casts through the engine; ratio = mxhorovod / mx.nd.cast (same loop)")
    return rows


# ---------------------------------------------------------------- allreduce_ on ranks


def worker(args):
    import mxnet as mx
    from mpi4py import MPI
    import mxhorovod as hvd
    comm = MPI.COMM_WORLD
    hvd.init()
    out = []
    order = [("float16", "Average"), ("float32", "Average"), ("float16", "Sum"), ("float32", "Sum")]
    for n in args.sizes:
        fns = []
        for dt, op in order:
            a = mx.nd.ones((n,), dtype=dt)  # one checked step: ones sum to size
            hvd.allreduce_(a, op=hvd.Sum, name="fp16.check.%s.%s.%d" % (dt, op, n))
            got = float(a.min().asscalar()), float(a.max().asscalar())
            if got != (hvd.size(), hvd.size()):
                raise SystemExit("%s: a sum of ones over %d ranks gave %s" % (dt, hvd.size(), got))
            # Averages of 0.5 stay 0.5, sums of 0 stay 0: no overflow, no subnormals.
            a[:] = 0.5 if op == "Average" else 0
            a.wait_to_read()

            def run(a=a, op=getattr(hvd, op), name="fp16.%s.%s.%d" % (dt, op, n)):
                hvd.allreduce_(a, op=op, name=name)
                a.wait_to_read()
            fns.append(run)
        measured = round_robin(fns, args.reps, barrier=comm.Barrier)
        for (dt, op), t in zip(order, measured):
            out.append({"elements": n, "dtype": dt, "op": op, "time_s": t})
    hvd.shutdown()
    if comm.Get_rank() != 0:
        return None
    return {"ranks": comm.Get_size(), "module": hvd.__file__, "rows": out,
            "simd": os.environ.get("MXHOROVOD_SIMD", "auto")}


def allreduce_rows(args):
    rows, errors = [], []
    for simd in args.simd:
        try:
            res = common.launch(args.np, os.path.abspath(__file__),
                                ["--worker", "--reps", args.reps, "--sizes",
                                 ",".join(map(str, args.sizes))],
                                env={"MXHOROVOD_SIMD": simd}, timeout=args.timeout)
        except RuntimeError as e:
            print("launch failed (MXHOROVOD_SIMD=%s): %s" % (simd, e), file=sys.stderr)
            errors.append({"simd": simd, "error": common.error_summary(e)})
            continue
        by = {(r["elements"], r["dtype"], r["op"]): r["time_s"] for r in res["rows"]}
        for n in args.sizes:
            for op in ("Average", "Sum"):
                f16, f32 = by[(n, "float16", op)], by[(n, "float32", op)]
                rows.append({"what": "allreduce_", "simd": simd, "ranks": res["ranks"],
                             "elements": n, "op": op, "float16_s": f16, "float32_s": f32,
                             "ratio": common.ratio(f16, f32)})
    common.print_table(
        ["MXHOROVOD_SIMD", "elements", "op", "float16 ms med (min..max)",
         "float32 ms med (min..max)", "ratio"],
        [[r["simd"], r["elements"], r["op"], fmt_ms(r["float16_s"]), fmt_ms(r["float32_s"]),
          "%.2f" % r["ratio"]] for r in rows],
        title="in-place allreduce_ on %d ranks, alternated; ratio = float16 / float32" % args.np)
    for e in errors:
        print("MXHOROVOD_SIMD=%s: failed: %s" % (e["simd"], e["error"]))
    return rows, errors


def main(argv=None):
    args = parse_args(argv)
    if common.in_rank(args, worker):
        return 0
    rows = kernel_rows(args) + cast_rows(args)
    ar_rows, errors = allreduce_rows(args)
    common.emit("fp16", rows + ar_rows, errors=errors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
