"""The ResNet-50 gradient set through MXNet's dist_sync kvstore against mxhorovod.

    python benchmarks/ps_vs_allreduce.py      # 2 workers (+ 2 servers, 1 scheduler) vs 2 ranks

The original Horovod argument: parameter servers move every gradient twice (push to a
server, pull back) through server processes; ring allreduce does not. Both sides reduce
the same gradient set (common.gradient_set, --set 161 by default) with the same number of
workers, on loopback, one after the other in this script run:

- dist_sync: this script starts the scheduler (DMLC_ROLE=scheduler), one server per
  worker and the workers, with DMLC_PS_ROOT_URI=127.0.0.1, a free DMLC_PS_ROOT_PORT,
  DMLC_NUM_SERVER, DMLC_NUM_WORKER; each worker makes ``mx.kv.create('dist_sync')``,
  inits one key per tensor, and per step pushes every gradient and pulls every result
  (one ``push`` and one ``pull`` of the key list), then ``mx.nd.waitall()``.
- mxhorovod: mpirun with as many ranks, one in-place Sum ``allreduce_`` per tensor per
  step, and the mpi4py floor (floors.py) in the same mpirun.
- Horovod (when importable, --horovod-python): the same as mxhorovod.

Figures: the median (min..max) step time over --reps steps. Headline ratio: dist_sync step
/ mxhorovod step. Every process is killed at the end, also on failure or timeout (each
run is started in its own process group). Prints a table and one JSON line.
"""
import argparse
import os
import socket
import sys

import common
from common import fmt_ms, ratio, timed


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="161", choices=["161", "193"], help="gradient set")
    ap.add_argument("--reps", type=int, default=10, help="timed steps")
    ap.add_argument("--limit", type=int, default=0, help="only the first N tensors")
    ap.add_argument("--quick", action="store_true", help="first 8 tensors, 2 steps (the "
                    "smoke test)")
    ap.add_argument("--ps-worker", action="store_true", help=argparse.SUPPRESS)
    common.add_launch_args(ap, configs=("default",))
    args = ap.parse_args(argv)
    if args.quick:
        args.limit, args.reps, args.configs = args.limit or 8, 2, ["default"]
    return args


def shapes(args):
    s = [sh for _, sh in common.gradient_set(args.set)]
    return s[:args.limit] if args.limit else s


def ps_worker(args):
    """A dist_sync worker (DMLC_ROLE=worker): push + pull of every tensor per step."""
    import mxnet as mx
    kv = mx.kv.create("dist_sync")
    arrays = [mx.nd.zeros(s) for s in shapes(args)]
    keys = list(range(len(arrays)))
    kv.init(keys, arrays)

    def step():
        kv.push(keys, arrays)
        kv.pull(keys, out=arrays)
        mx.nd.waitall()
    # No updater on the servers: a pull returns the sum of the workers' pushes.
    common.check_sum(mx, arrays, step, kv.num_workers, "dist_sync")
    t = timed(step, args.reps, barrier=kv._barrier)
    if kv.rank == 0:
        common.emit_result({"workers": kv.num_workers, "servers": int(
            os.environ["DMLC_NUM_SERVER"]), "tensors": len(arrays),
            "bytes": 4 * sum(a.size for a in arrays), "step_s": t})
    kv._barrier()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_dist_sync(args):
    """Starts scheduler, servers and workers (one process group); returns worker 0's
    result."""
    n = args.np
    base = common.rank_env({"DMLC_PS_ROOT_URI": "127.0.0.1",
                            "DMLC_PS_ROOT_PORT": str(free_port()),
                            "DMLC_NUM_SERVER": str(n), "DMLC_NUM_WORKER": str(n),
                            "DMLC_NODE_HOST": "127.0.0.1", "DMLC_INTERFACE": "lo"})
    py = sys.executable
    service = [py, "-c", "import mxnet"]  # importing mxnet runs the scheduler/server loop
    procs = [common.start(service, dict(base, DMLC_ROLE="scheduler"), group=0)]
    group = procs[0].pgid
    try:
        procs += [common.start(service, dict(base, DMLC_ROLE="server"), group)
                  for _ in range(n)]
        wargs = [os.path.abspath(__file__), "--ps-worker", "--set", args.set, "--reps",
                 str(args.reps), "--limit", str(args.limit)]
        procs = [common.start([py] + wargs, dict(base, DMLC_ROLE="worker"), group)
                 for _ in range(n)] + procs
    except BaseException:
        common.kill_group(procs[0])
        raise
    # Workers first: the scheduler and servers exit once every worker has finalized.
    outs = common.finish(procs, args.timeout, "dist_sync (%d workers)" % n)
    res = [r for out in outs for r in common.results_of(out)]
    if not res:
        raise RuntimeError("dist_sync printed no result\n%s" % outs[0][-4000:])
    return res[0]


def worker(args):
    """An mxhorovod or Horovod rank: one allreduce_ per tensor per step, and the floor."""
    import mxnet as mx
    from mpi4py import MPI

    import floors
    hvd = common.load_hvd(args.impl)
    comm = MPI.COMM_WORLD
    sh = shapes(args)
    floor = floors.measure(comm, sh, args.reps, contiguous=False)["floor"]
    hvd.init()
    arrays = [mx.nd.zeros(s) for s in sh]
    step = common.per_tensor_step(hvd, mx, arrays, "ps%s" % args.set)
    common.check_sum(mx, arrays, step, hvd.size(), args.impl)
    t = timed(step, args.reps, barrier=comm.Barrier)
    res = {"ranks": hvd.size(), "module": hvd.__file__, "tensors": len(arrays),
           "bytes": 4 * sum(a.size for a in arrays), "step_s": t, "floor_s": floor}
    hvd.shutdown()
    return res if comm.Get_rank() == 0 else None


def report(results):
    rows = []
    by = {}
    for res in results:
        if "error" in res:
            continue
        name = res["impl"] if res["impl"] == "dist_sync" else common.label(res)
        by[name] = res
        rows.append({"run": name, "tensors": res["tensors"], "bytes": res["bytes"],
                     "step_s": res["step_s"], "floor_s": res.get("floor_s")})
    ps = by.get("dist_sync")
    for r in rows:
        r["dist_sync_over_this"] = ratio(ps["step_s"], r["step_s"]) if ps else None
        r["over_floor"] = ratio(r["step_s"], r["floor_s"]) if r["floor_s"] else None
    common.print_table(
        ["run", "tensors", "MB", "step ms med (min..max)", "dist_sync / this",
         "floor ms (mpi4py)", "this / floor"],
        [[r["run"], r["tensors"], "%.1f" % (r["bytes"] / 1e6), fmt_ms(r["step_s"], 1),
          "%.2f" % r["dist_sync_over_this"] if r["dist_sync_over_this"] else "-",
          fmt_ms(r["floor_s"], 1), "%.2f" % r["over_floor"] if r["over_floor"] else "-"]
         for r in rows],
        title="ResNet-50 gradient set, push+pull (dist_sync) vs allreduce, %s workers "
              "each; same script run" % next((r.get("workers") for r in results
                                               if r.get("workers")), "?"))
    common.print_failures(results)
    headline = by.get("mxhorovod") and ps and ratio(ps["step_s"], by["mxhorovod"]["step_s"])
    return common.emit("ps_vs_allreduce", rows, dist_sync_over_mxhorovod=headline or None,
                       errors=common.errors_of(results))


def main(argv=None):
    args = parse_args(argv)
    if args.ps_worker:
        return ps_worker(args)
    if args.worker or common.under_mpirun():
        return common.run_script(args, worker, report, os.path.abspath(__file__), [])
    try:
        ps = run_dist_sync(args)
    except RuntimeError as e:
        print("dist_sync failed: %s" % e, file=sys.stderr)
        ps = {"error": common.error_summary(e)}
    ps.update(impl="dist_sync", config="default")
    wargs = ["--set", args.set, "--reps", args.reps, "--limit", args.limit]
    results = [ps] + common.launch_all(args, os.path.abspath(__file__), wargs)
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
