"""The ResNet-50 v1 gradient set, one allreduce_ per tensor per step, against its floor.

    python benchmarks/resnet50_gradients.py     # mpirun -np 2 once per configuration

Sets (see common.resnet50_gradient_shapes): "161", the 161 weight tensors of
``mxnet.gluon.model_zoo.vision.resnet50_v1()`` without the 32 small conv biases Gluon adds
(25.56 M float32, 102.2 MB), and "193", every gradient of that model. One step = an
in-place float32 Sum ``hvd.allreduce_`` of every tensor (its own name, as a training loop
does), then ``mx.nd.waitall()``; the figure is the median (min..max) over --reps steps.

The floor, measured in the same mpirun before ``hvd.init()`` (see floors.py): the fastest
plain mpi4py strategy for separate numpy arrays, one call per array or pack + one or
sliced calls + unpack. Also measured: the contiguous floor (the data already in one
buffer, one call or 1-16 MiB slices) and one numpy copy of the set.

Trainer rows (default on; --no-trainer): ``DistributedTrainer.allreduce_grads()`` on the
parameters of a real resnet50_v1 (the 193 set; --trainer-model), against the floor for
separate arrays, and, when the trainer takes ``gradient_as_bucket_view``, with contiguous
buckets against the contiguous floor. Every row (sets and trainer) is compared with the
strategy that won its floors, timed again in alternation with the row's steps (floor
name "..., interleaved"), since a floor measured minutes earlier can be off by 30% on a
noisy machine. Configurations and Horovod rows as in allreduce.py. Prints
tables and one JSON line.
"""
import argparse
import inspect
import os
import sys

import common
from common import fmt_ms, ratio

SETS = ("161", "193")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="161,193", help="gradient sets: 161, 193 or both")
    ap.add_argument("--reps", type=int, default=10, help="timed steps per row")
    ap.add_argument("--limit", type=int, default=0, help="only the first N tensors of a set")
    ap.add_argument("--no-trainer", dest="trainer", action="store_false",
                    help="no DistributedTrainer rows")
    ap.add_argument("--trainer-model", default="resnet50_v1",
                    help="gluon model zoo name for the trainer rows (default resnet50_v1)")
    ap.add_argument("--quick", action="store_true", help="first 8 tensors, 2 steps, "
                    "trainer rows on mobilenet0.25, default configuration only (the smoke "
                    "test)")
    common.add_launch_args(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.limit, args.reps, args.configs = args.limit or 8, 2, ["default"]
        args.trainer_model = "mobilenet0.25"
    args.sets = [s for s in args.sets.split(",") if s]
    for s in args.sets:
        if s not in SETS:
            ap.error("unknown gradient set %r (161 or 193)" % s)
    return args


def shapes_of(which, limit):
    shapes = [s for _, s in common.gradient_set(which)]
    return shapes[:limit] if limit else shapes


def trainer_nets(mx, model, variants):
    """One initialized model per variant (shapes final), built before ``hvd.init()``."""
    nets = {}
    for key in variants:
        net = mx.gluon.model_zoo.vision.get_model(model)
        net.initialize()
        with mx.autograd.record():  # finish deferred initialization (shapes); training
            net(mx.nd.zeros((1, 3, 32, 32)))  # mode keeps MKLDNN from reordering weights
        nets[key] = net
    return nets


def trainer_variants(hvd):
    """[(key, DistributedTrainer keyword arguments)]: plain, and contiguous buckets when
    the trainer takes ``gradient_as_bucket_view``."""
    sig = inspect.signature(hvd.DistributedTrainer.__init__).parameters
    out = [("trainer", {})]
    if "gradient_as_bucket_view" in sig:
        out.append(("trainer_bucket_view", {"gradient_as_bucket_view": True}))
    return out


def trainer_rows(hvd, mx, comm, nets, variants, reps, trainer_floors):
    """allreduce_grads() of DistributedTrainer over each net's parameters, timed
    :func:`floors.interleaved` with the strategy that won its floors (the plain trainer: the
    floor of separate arrays; bucket views: the fastest contiguous one)."""
    import floors
    out = {}
    for key, kw in variants:
        params = nets[key].collect_params()
        # No broadcast_parameters: only the gradients' reduction is timed.
        trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.0}, **kw)
        shapes = [p.shape for p in params.values() if p.grad_req != "null"]
        strategy = trainer_floors["contiguous_best" if key == "trainer_bucket_view"
                                  else "floor"]["strategy"]

        def step():
            trainer.allreduce_grads()
            mx.nd.waitall()
        ours, floor = floors.interleaved(comm, shapes, strategy, step, reps)
        out[key] = dict(ours, tensors=len(shapes), floor_interleaved=floor)
    if len(variants) == 1:
        out["trainer_bucket_view"] = {"skipped": "DistributedTrainer has no "
                                                 "gradient_as_bucket_view argument"}
    return out


def worker(args):
    import mxnet as mx
    from mpi4py import MPI

    import floors
    hvd = common.load_hvd(args.impl)
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    sets = {s: shapes_of(s, args.limit) for s in args.sets}
    # Floors before init(): the library's background thread cannot slow them.
    measured = {s: floors.measure(comm, shapes, args.reps) for s, shapes in sets.items()}
    if args.trainer:
        variants = trainer_variants(hvd)
        nets = trainer_nets(mx, args.trainer_model, [k for k, _ in variants])
        grads = [p.shape for p in next(iter(nets.values())).collect_params().values()
                 if p.grad_req != "null"]
        # The trainer reduces every gradient of the model: that set's floors (for
        # resnet50_v1 the 193 set's, already measured when asked for in full).
        trainer_floors = measured["193"] if (args.trainer_model == "resnet50_v1" and "193"
                                             in sets and not args.limit) else \
            floors.measure(comm, grads, args.reps)
    hvd.init()
    result = {"ranks": p, "module": hvd.__file__, "sets": {}}
    for s, shapes in sets.items():
        arrays = [mx.nd.zeros(sh) for sh in shapes]
        step = common.per_tensor_step(hvd, mx, arrays, "g%s" % s)
        common.check_sum(mx, arrays, step, p, "%s, set %s" % (args.impl, s))
        n = sum(a.size for a in arrays)
        ours, floor = floors.interleaved(comm, shapes, measured[s]["floor"]["strategy"], step,
                                         args.reps)
        result["sets"][s] = {"tensors": len(arrays), "bytes": 4 * n, "per_tensor": ours,
                             "floor_interleaved": floor, "floors": measured[s]}
        del arrays
    if args.trainer:
        result["trainer"] = trainer_rows(hvd, mx, comm, nets, variants, args.reps,
                                         trainer_floors)
        result["trainer"].update(floors=trainer_floors, model=args.trainer_model)
    hvd.shutdown()
    return result if comm.Get_rank() == 0 else None


def rows_of(res):
    """Flat rows: (impl, config, set, what, stats, floor stats, floor name)."""
    out = []
    for s, d in res.get("sets", {}).items():
        f = d.get("floor_interleaved") or d["floors"]["floor"]
        out.append({"set": s, "tensors": d["tensors"], "bytes": d["bytes"],
                    "what": "allreduce_ per tensor", "time_s": d["per_tensor"],
                    "floor_s": f, "floor": f["strategy"], "ratio": ratio(d["per_tensor"], f)})
    tr = res.get("trainer", {})
    f193 = tr.get("floors")
    for key, what, floor_key in (("trainer", "DistributedTrainer.allreduce_grads", "floor"),
                                 ("trainer_bucket_view", "... gradient_as_bucket_view",
                                  "contiguous_best")):
        t = tr.get(key)
        if not t or "skipped" in t:
            continue
        fl = t.get("floor_interleaved") or (f193[floor_key] if f193 else None)
        out.append({"set": tr["model"], "tensors": t["tensors"], "bytes": None, "what": what,
                    "time_s": t, "floor_s": fl, "floor": fl["strategy"] if fl else None,
                    "ratio": ratio(t, fl) if fl else None})
    for r in out:
        r.update(impl=res["impl"], config=res["config"])
    return out


def comparisons(rows):
    """Horovod over mxhorovod, same script run, same set and configuration: the raw ratio
    of medians and the ratio of their ratios to their own floors (drift-free)."""
    out = []
    key = lambda r: (r["config"], r["set"], r["what"])  # noqa: E731
    ours = {key(r): r for r in rows if r["impl"] == "mxhorovod"}
    for r in rows:
        o = ours.get(key(r))
        if r["impl"] != "horovod" or o is None:
            continue
        out.append({"config": r["config"], "set": r["set"], "what": r["what"],
                    "horovod_over_mxhorovod": ratio(r["time_s"], o["time_s"]),
                    "floor_normalized": (r["ratio"] / o["ratio"]
                                         if r["ratio"] and o["ratio"] else None)})
    return out


def report(results):
    rows = [r for res in results for r in rows_of(res)]
    ranks = next((r["ranks"] for r in results if "ranks" in r), None)
    common.print_table(
        ["run", "set", "tensors", "what", "time ms med (min..max)", "floor ms", "floor",
         "ratio"],
        [[common.label(r), r["set"], r["tensors"], r["what"], fmt_ms(r["time_s"], 2),
          fmt_ms(r["floor_s"], 2), r["floor"] or "-",
          "%.2f" % r["ratio"] if r["ratio"] else "-"] for r in rows],
        title="ResNet-50 v1 gradient set, %s ranks, one step; ratio = time / floor "
              "(same mpirun)" % ranks)
    common.print_failures(results)
    floor_tables = {}
    for res in results:
        for s, d in res.get("sets", {}).items():
            if res["impl"] == "mxhorovod" and res["config"] == "default":
                floor_tables[s] = d["floors"]
    if floor_tables:
        print()
        names = [k for k in next(iter(floor_tables.values())) if not k.endswith("best")
                 and k != "floor"]
        common.print_table(["floor strategy (mpi4py)"] + ["set %s ms" % s for s in floor_tables],
                           [[k] + [fmt_ms(f.get(k), 2) for f in floor_tables.values()]
                            for k in names],
                           title="the floors measured in mxhorovod's default run")
    comps = comparisons(rows)
    if comps:
        print()
        common.print_table(["config", "set", "what", "horovod / mxhorovod",
                            "same, each over its floor"],
                           [[c["config"], c["set"], c["what"],
                             "%.2f" % c["horovod_over_mxhorovod"],
                             "%.2f" % c["floor_normalized"] if c["floor_normalized"] else "-"]
                            for c in comps], title="Horovod against mxhorovod (same script run)")
    skipped = sorted({"%s: %s" % (res["impl"], res["trainer"]["trainer_bucket_view"]["skipped"])
                      for res in results
                      if "skipped" in res.get("trainer", {}).get("trainer_bucket_view", {})})
    for line in skipped:  # the library whose trainer lacks it (Horovod's, as a rule)
        print("bucket-view row skipped for %s" % line)
    return common.emit("resnet50_gradients", rows, ranks=ranks, comparisons=comps,
                       floors=floor_tables, errors=common.errors_of(results))


def main(argv=None):
    args = parse_args(argv)
    wargs = ["--sets", ",".join(args.sets), "--reps", args.reps, "--limit", args.limit,
             "--trainer-model", args.trainer_model] + ([] if args.trainer else ["--no-trainer"])
    return common.run_script(args, worker, report, os.path.abspath(__file__), wargs)


if __name__ == "__main__":
    sys.exit(main())
