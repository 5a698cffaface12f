"""Many small tensors per step (the latency-bound case), one call each and grouped.

    python benchmarks/small_tensors.py     # mpirun -np 2 once per configuration

One step reduces --count float32 tensors of --bytes each (default 1,000 x 1 KiB), in place
with Sum, then ``mx.nd.waitall()``: either one named ``hvd.allreduce_`` per tensor
("each") or one ``hvd.grouped_allreduce_`` of all of them ("grouped"). Floors, measured in
the same mpirun before ``hvd.init()`` (floors.py): mpi4py's ``comm.Allreduce`` once per
numpy array ("per_call", the floor of "each") and pack + one call + unpack
("pack_one_call", the floor of "grouped"), each the faster of MPI's built-in sum and a
user-defined one ("_userop", see floors.py); the winner (rank 0's) is timed again in
alternation with the row's steps ("..., interleaved"), so both see the same moments. A third row, "engine_noop", times one MXNet
engine operation per tensor that completes at once (mxhorovod._core.engine_noop; no
communication): the cost per call that MXNet's engine adds to any collective pushed into
it, shown beside "each". Figures are the median (min..max) over --reps
steps; ratio = time / its floor. Configurations and Horovod rows as in allreduce.py.
Prints a table and one JSON line.
"""
import argparse
import os
import sys

import common
from common import either_op, fmt_ms, ratio, timed


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000, help="tensors per step")
    ap.add_argument("--bytes", type=int, default=1024, help="bytes per tensor (float32)")
    ap.add_argument("--reps", type=int, default=20, help="timed steps per row")
    ap.add_argument("--quick", action="store_true", help="50 tensors, 2 steps, default "
                    "configuration only (the smoke test)")
    common.add_launch_args(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.count, args.reps, args.configs = min(args.count, 50), 2, ["default"]
    if args.count < 1 or args.bytes < 4:
        ap.error("need --count >= 1 and --bytes >= 4")
    return args


def worker(args):
    import mxnet as mx
    from mpi4py import MPI

    import floors
    hvd = common.load_hvd(args.impl)
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    shape = (args.bytes // 4,)
    measured = floors.measure(comm, [shape] * args.count, args.reps, contiguous=False,
                              slices=())
    hvd.init()
    arrays = [mx.nd.zeros(shape) for _ in range(args.count)]

    def each():
        for i, a in enumerate(arrays):
            hvd.allreduce_(a, op=hvd.Sum, name="small.%d" % i)
        mx.nd.waitall()

    def grouped():
        hvd.grouped_allreduce_(arrays, op=hvd.Sum, name="small.group")
        mx.nd.waitall()

    rows, interleaved = {}, {}
    try:
        from mxhorovod import _core as mxh_core
    except ImportError:  # Horovod's run without mxhorovod on the path
        mxh_core = None
    if mxh_core is not None:
        handles = [a.handle.value for a in arrays]

        def engine_noop():
            for h in handles:
                mxh_core.engine_noop(h)
            mx.nd.waitall()
        rows["engine_noop"] = timed(engine_noop, args.reps, barrier=comm.Barrier)
    for what, step in (("each", each), ("grouped", grouped)):
        for a in arrays:  # one checked step: ones sum to p on every rank
            a[:] = 1
        step()
        got = {float(arrays[0][0].asscalar()), float(arrays[-1][-1].asscalar())}
        if got != {float(p)}:
            raise SystemExit("%s: allreduce of ones over %d ranks gave %s" % (what, p, got))
        for a in arrays:
            a[:] = 0
        strategy = either_op(measured, "per_call" if what == "each" else "pack_one_call")
        rows[what], interleaved[what] = floors.interleaved(
            comm, [shape] * args.count, strategy["strategy"], step, args.reps)
    hvd.shutdown()
    if comm.Get_rank() != 0:
        return None
    return {"ranks": p, "module": hvd.__file__, "count": args.count, "bytes": args.bytes,
            "each": rows["each"], "grouped": rows["grouped"],
            "engine_noop": rows.get("engine_noop"), "floors": measured,
            "floors_interleaved": interleaved}


def rows_of(res):
    f = res["floors"]
    out = []
    for what, strategy in (("each", "per_call"), ("grouped", "pack_one_call")):
        floor = res.get("floors_interleaved", {}).get(what) or either_op(f, strategy)
        out.append({"impl": res["impl"], "config": res["config"], "what": what,
                    "count": res["count"], "bytes": res["bytes"], "time_s": res[what],
                    "floor": floor["strategy"], "floor_s": floor,
                    "ratio": ratio(res[what], floor),
                    "per_tensor_us": res[what]["median"] / res["count"] * 1e6})
    if res.get("engine_noop"):
        floor = either_op(f, "per_call")
        out.append({"impl": "mxnet", "config": "engine", "what": "engine_noop",
                    "count": res["count"], "bytes": res["bytes"], "time_s": res["engine_noop"],
                    "floor": floor["strategy"], "floor_s": floor,
                    "ratio": ratio(res["engine_noop"], floor),
                    "per_tensor_us": res["engine_noop"]["median"] / res["count"] * 1e6})
    return out


def report(results):
    rows = [r for res in results if "error" not in res for r in rows_of(res)]
    seen_engine = False  # one engine row is enough (every configuration measures it)
    kept = []
    for r in rows:
        if r["what"] == "engine_noop":
            if seen_engine:
                continue
            seen_engine = True
        kept.append(r)
    rows = kept
    ranks = next((r["ranks"] for r in results if "ranks" in r), None)
    count = next((r["count"] for r in results if "count" in r), None)
    common.print_table(
        ["run", "what", "time ms med (min..max)", "us per tensor", "floor", "floor ms",
         "ratio"],
        [[common.label(r), r["what"], fmt_ms(r["time_s"], 2), "%.1f" % r["per_tensor_us"],
          r["floor"], fmt_ms(r["floor_s"], 2), "%.2f" % r["ratio"]] for r in rows],
        title="%s tensors per step, %s ranks; ratio = time / floor (same mpirun)"
              % (count, ranks))
    common.print_failures(results)
    return common.emit("small_tensors", rows, ranks=ranks, errors=common.errors_of(results))


def main(argv=None):
    args = parse_args(argv)
    return common.run_script(args, worker, report, os.path.abspath(__file__),
                             ["--count", args.count, "--bytes", args.bytes,
                              "--reps", args.reps])


if __name__ == "__main__":
    sys.exit(main())
