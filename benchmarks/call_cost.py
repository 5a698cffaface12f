"""Where the time of one collective call goes, stage by stage (the latency-bound case).

    python benchmarks/call_cost.py          # mpirun -np 2: mxhorovod, then Horovod

One step: --count float32 tensors of --bytes each (default 1,000 x 1 KiB), one named
in-place Sum ``hvd.allreduce_`` per tensor, then ``mx.nd.waitall()``, as a training loop
reduces the biases and norms of a transformer. Every figure is in microseconds per tensor,
the median over --reps steps. Measured in the same mpirun:

- ``MPI's own call`` (the floor): mpi4py's blocking ``comm.Allreduce`` per numpy array,
  before ``hvd.init()`` (floors.py, the faster of the built-in and a user-defined sum).
- ``step``: the whole step, from the first call to the end of ``waitall()``.
- On the calling thread: ``Python loop`` (the loop calling a function that does nothing),
  ``Python wrapper`` (``hvd.allreduce_`` with the extension's call replaced by one that does
  nothing: argument checks, naming, process-set lookup), ``calls return`` (the loop of real
  calls, until the last returns: the wrapper, the binding, the checks of the arrays, the
  engine push and the hand-off to the background thread), and ``MXNet engine push``
  (``_core.engine_noop``: an operation that completes at once, pushed as ours are).
- ``CPU, calling thread`` and ``CPU, library threads``: CPU time per tensor of the thread
  that calls and of the threads that ``hvd.init()`` started. With as many ranks as cores
  the step cannot be shorter than their sum.
- The steps by time: the step at the 25th, 50th and 90th percentile, with its number of
  negotiation cycles (mxhorovod only).
- On the background thread (mxhorovod only, from ``_core.loop_stats()``): ``negotiation``
  (the response cache's bit vector, the coordinator round for new names, and the wait for
  the peers to submit the same names), ``planning`` (taking the entries, fusion groups),
  ``execution`` (fusion copies, MPI, reductions by cross-memory attach), ``completion``
  (the callbacks: MXNet's completion of the engine operations, the names' lines) and
  ``asleep`` (waiting for work, between the timed steps too).

Horovod 0.28.1 runs the same step in its own mpirun (``--horovod-python``); the stages it
does not expose are left blank. Prints a table and one JSON line.
"""
import argparse
import os
import sys
import time

import common
from common import either_op, stats

STAGES = ("negotiate", "plan", "execute", "complete", "sleep")
STAGE_NAMES = {"negotiate": "background: negotiation", "plan": "background: planning",
               "execute": "background: execution", "complete": "background: completion",
               "sleep": "background: asleep (also between steps)"}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000, help="tensors per step")
    ap.add_argument("--bytes", type=int, default=1024, help="bytes per tensor (float32)")
    ap.add_argument("--reps", type=int, default=50, help="timed steps")
    ap.add_argument("--quick", action="store_true", help="50 tensors, 3 steps (smoke test)")
    common.add_launch_args(ap, configs=("default",))
    args = ap.parse_args(argv)
    if args.quick:
        args.count, args.reps = min(args.count, 50), 3
    if args.count < 1 or args.bytes < 4:
        ap.error("need --count >= 1 and --bytes >= 4")
    return args


def _cpu_by_kind(before, after, main_tid, library):
    """CPU seconds between two common.thread_cpu() readings: (calling thread, library's)."""
    main = lib = 0.0
    for tid, (name, sec) in after.items():
        spent = sec - before.get(tid, (name, 0.0))[1]
        if tid == main_tid:
            main += spent
        elif tid in library:
            lib += spent
    return main, lib


def worker(args):
    import mxnet as mx
    from mpi4py import MPI

    import floors
    hvd = common.load_hvd(args.impl)
    comm = MPI.COMM_WORLD
    n, shape = args.count, (args.bytes // 4,)
    floor = either_op(floors.measure(comm, [shape] * n, args.reps, contiguous=False,
                                     slices=()), "per_call")
    arrays = [mx.nd.zeros(shape) for _ in range(n)]
    mx.nd.waitall()  # MXNet's engine threads exist before init(): they are not the library's
    names = ["small.%d" % i for i in range(n)]
    before_init = set(common.thread_cpu())
    hvd.init()
    library = set(common.thread_cpu()) - before_init
    main_tid = int(open("/proc/thread-self/stat").read().split()[0])
    sum_op = hvd.Sum
    calls, steps = [], []  # steps: (seconds, negotiation cycles) of each step
    stats_of = None

    def step():
        c0 = stats_of()["cycles"] if stats_of else 0
        t0 = time.perf_counter()
        for i, a in enumerate(arrays):
            hvd.allreduce_(a, op=sum_op, name=names[i])
        calls.append(time.perf_counter() - t0)
        mx.nd.waitall()
        steps.append((time.perf_counter() - t0, (stats_of()["cycles"] - c0) if stats_of else 0))

    for a in arrays:  # one checked step: ones sum to p on every rank
        a[:] = 1
    step()
    got = {float(arrays[0][0].asscalar()), float(arrays[-1][-1].asscalar())}
    if got != {float(comm.Get_size())}:
        raise SystemExit("allreduce_ of ones over %d ranks gave %s" % (comm.Get_size(), got))
    for a in arrays:
        a[:] = 0
    for _ in range(3):
        step()
    core = None
    if args.impl == "mxhorovod":
        from mxhorovod import _core as core
    stats_of = getattr(core, "loop_stats", None)  # absent before this release
    calls.clear()
    steps.clear()
    cpu0, loop0 = common.thread_cpu(), stats_of() if stats_of else None
    st = common.timed(step, args.reps, warmup=0, barrier=comm.Barrier)
    main_cpu, lib_cpu = _cpu_by_kind(cpu0, common.thread_cpu(), main_tid, library)
    loop1 = stats_of() if stats_of else None
    per = 1e6 / n  # seconds per step -> microseconds per tensor
    out = {"step": st["median"] * per, "floor": floor["median"] * per,
           "floor_strategy": floor["strategy"],
           "calls": stats(calls)["median"] * per,
           "cpu_main": main_cpu / args.reps * per, "cpu_library": lib_cpu / args.reps * per}
    steps.sort()
    out["step_quantiles"] = {"%d%%" % q: {"us_per_tensor": steps[k][0] * per, "cycles": steps[k][1]}
                             for q in (25, 50, 90)
                             for k in [min(len(steps) - 1, len(steps) * q // 100)]}

    def loop_of(fn):
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            for i, a in enumerate(arrays):
                fn(a, op=sum_op, name=names[i])
            times.append(time.perf_counter() - t0)
        return stats(times)["median"] * per

    out["python_loop"] = loop_of(lambda *a, **k: None)
    if loop0 is not None:
        steps = args.reps
        spent = {k: loop1[k + "_ns"] - loop0[k + "_ns"] for k in STAGES}
        out["stages"] = {k: v / 1e3 / steps / n for k, v in spent.items()}
        out["cycles_per_step"] = (loop1["cycles"] - loop0["cycles"]) / steps
        out["groups_per_step"] = (loop1["groups"] - loop0["groups"]) / steps
    if core is not None:
        from mxhorovod.collectives import submit

        class NoCall:  # the extension's module, with a call that does nothing
            def __getattr__(self, name):
                return getattr(core, name)

            @staticmethod
            def allreduce(*a):
                return None
        submit._core = NoCall()
        try:
            out["python_wrapper"] = loop_of(hvd.allreduce_)
        finally:
            submit._core = core
        handles = [a.handle.value for a in arrays]

        def noop():
            for h in handles:
                core.engine_noop(h)
            mx.nd.waitall()
        out["engine_push"] = common.timed(noop, args.reps)["median"] * per
    hvd.shutdown()
    if comm.Get_rank() != 0:
        return None
    out.update(ranks=comm.Get_size(), count=n, bytes=args.bytes)
    return out


def _fmt(v):
    return "" if v is None else "%.2f" % v


def rows_of(results):
    """[(stage, {label: us per tensor})] for the table, in reading order."""
    ok = [r for r in results if "error" not in r]

    def col(key):
        return {common.label(r): r.get(key) for r in ok}

    rows = [("MPI's own call (the floor)", col("floor")),
            ("step", col("step")),
            ("step / floor", {common.label(r): r["step"] / r["floor"] for r in ok}),
            ("Python loop", col("python_loop")),
            ("Python wrapper (incl. loop)", col("python_wrapper")),
            ("MXNet engine push of a no-op", col("engine_push")),
            ("calls return (calling thread)", col("calls")),
            ("CPU, calling thread", col("cpu_main")),
            ("CPU, library threads", col("cpu_library"))]
    for k in STAGES:
        rows.append((STAGE_NAMES[k], {common.label(r): r.get("stages", {}).get(k) for r in ok}))
    return rows


def report(results):
    labels = [common.label(r) for r in results if "error" not in r]
    rows = rows_of(results)
    first = next((r for r in results if "error" not in r), {})
    common.print_table(
        ["stage"] + ["%s us/tensor" % lb for lb in labels],
        [[name] + [_fmt(vals.get(lb)) for lb in labels] for name, vals in rows],
        title="one allreduce_ per tensor: %s x %s B float32 per step, %s ranks; "
              "microseconds per tensor (medians)" % (first.get("count"), first.get("bytes"),
                                                     first.get("ranks")))
    for r in results:
        q = r.get("step_quantiles")
        if q and "cycles_per_step" in r:
            print("%s: steps by time: %s (us per tensor, negotiation cycles)" % (
                common.label(r), ", ".join("%s %.2f (%d)" % (k, v["us_per_tensor"], v["cycles"])
                                           for k, v in q.items())))
        if "cycles_per_step" in r:
            print("%s: %.1f negotiation cycles and %.1f executor runs per step; floor: %s"
                  % (common.label(r), r["cycles_per_step"], r["groups_per_step"],
                     r["floor_strategy"]))
    common.print_failures(results)
    return common.emit("call_cost", [r for r in results if "error" not in r],
                       errors=common.errors_of(results))


def main(argv=None):
    args = parse_args(argv)
    return common.run_script(args, worker, report, os.path.abspath(__file__),
                             ["--count", args.count, "--bytes", args.bytes,
                              "--reps", args.reps])


if __name__ == "__main__":
    sys.exit(main())
