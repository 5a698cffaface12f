"""CPU burnt by an idle rank and by a rank waiting for a late peer, per second.

    python benchmarks/idle_cpu.py     # mpirun -np 2, then the same for Horovod if importable

Every rank sleeps --seconds with nothing to do, once before ``hvd.init()`` (MXNet and MPI
loaded, no background thread yet) and once after it (after a few warm-up collectives, so
the background thread is in its steady state). Per rank and per phase: the process's CPU
time (all threads, ``time.process_time``) per second of wall time, and the CPU time of
the threads that ``hvd.init()`` started (from /proc/self/task/*/schedstat, ns), per
second. An idle rank should burn ~0: a background thread that spins or polls MPI shows up
as up to 1.0 (a whole core) in "library threads". Then a third phase, "waiting": every rank
but the last starts an allreduce at once and the last rank starts it --seconds later (the
rank ahead in backward, waiting for its peer's gradients): the library threads' CPU per
second of the early ranks while they wait. It should be ~0 too: on a machine with as many
ranks as cores, what a waiting rank burns is taken from its own model's threads. Prints a
table and one JSON line.
"""
import argparse
import os
import sys
import time

import common

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="idle seconds per phase")
    ap.add_argument("--quick", action="store_true", help="0.5 s per phase (the smoke test)")
    common.add_launch_args(ap, configs=("default",))
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds, args.configs = min(args.seconds, 0.5), ["default"]
    return args


def idle(comm, seconds, library_tids=()):
    comm.Barrier()
    th0, cpu0, t0 = common.thread_cpu(), time.process_time(), time.perf_counter()
    time.sleep(seconds)
    th1, cpu1, t1 = common.thread_cpu(), time.process_time(), time.perf_counter()
    wall = t1 - t0
    lib = sum(th1[t][1] - th0[t][1] for t in library_tids if t in th0 and t in th1)
    busiest = max(((th1[t][1] - th0[t][1], th1[t][0], t) for t in th1 if t in th0),
                  default=(0.0, "-", 0))
    return {"wall_s": wall, "process_cpu_per_s": (cpu1 - cpu0) / wall,
            "library_threads_cpu_per_s": lib / wall,
            "busiest_thread": {"name": busiest[1], "tid": busiest[2],
                               "cpu_per_s": busiest[0] / wall}}


def wait_for_late_peer(hvd, mx, comm, seconds, library_tids):
    """The last rank joins an allreduce `seconds` after the others; their library CPU/s."""
    x = mx.nd.ones((1024,))
    late = comm.Get_rank() == comm.Get_size() - 1
    comm.Barrier()
    if late:
        time.sleep(seconds)
    th0, t0 = common.thread_cpu(), time.perf_counter()
    hvd.allreduce_(x, op=hvd.Sum, name="idle.late")
    x.wait_to_read()
    th1, t1 = common.thread_cpu(), time.perf_counter()
    lib = sum(th1[t][1] - th0[t][1] for t in library_tids if t in th0 and t in th1)
    return None if late else {"wall_s": t1 - t0, "library_threads_cpu_per_s": lib / (t1 - t0)}


def worker(args):
    import mxnet as mx
    from mpi4py import MPI

    hvd = common.load_hvd(args.impl)
    comm = MPI.COMM_WORLD
    mx.nd.ones((4,)).wait_to_read()  # MXNet's engine threads started
    before_tids = set(common.thread_cpu())
    before = idle(comm, args.seconds)
    hvd.init()
    x = mx.nd.ones((1024,))
    for i in range(5):
        hvd.allreduce_(x, op=hvd.Sum, name="idle.warmup")
        hvd.grouped_allreduce_([x], op=hvd.Sum, name="idle.group")
        x.wait_to_read()
    new_tids = set(common.thread_cpu()) - before_tids
    after = idle(comm, args.seconds, new_tids)
    waiting = wait_for_late_peer(hvd, mx, comm, args.seconds, new_tids)
    mine = {"rank": comm.Get_rank(), "before_init": before, "after_init": after,
            "waiting": waiting, "library_threads": len(new_tids)}
    ranks = comm.gather(mine, root=0)
    hvd.shutdown()
    if comm.Get_rank() != 0:
        return None
    return {"ranks": comm.Get_size(), "module": hvd.__file__, "seconds": args.seconds,
            "per_rank": ranks}


def report(results):
    rows = []
    for res in results:
        for r in res.get("per_rank", []):
            rows.append({"impl": res["impl"], "config": res["config"], "rank": r["rank"],
                         "seconds": res["seconds"],
                         "before_init_cpu_per_s": r["before_init"]["process_cpu_per_s"],
                         "after_init_cpu_per_s": r["after_init"]["process_cpu_per_s"],
                         "library_threads": r["library_threads"],
                         "library_threads_cpu_per_s":
                             r["after_init"]["library_threads_cpu_per_s"],
                         "busiest_thread": r["after_init"]["busiest_thread"],
                         "waiting_library_threads_cpu_per_s":
                             (r.get("waiting") or {}).get("library_threads_cpu_per_s")})
    common.print_table(
        ["run", "rank", "CPU s/s before init", "CPU s/s after init", "library threads",
         "their CPU s/s", "busiest thread after init", "their CPU s/s waiting for a peer"],
        [[common.label(r), r["rank"], "%.4f" % r["before_init_cpu_per_s"],
          "%.4f" % r["after_init_cpu_per_s"], r["library_threads"],
          "%.4f" % r["library_threads_cpu_per_s"],
          "%s %.4f" % (r["busiest_thread"]["name"], r["busiest_thread"]["cpu_per_s"]),
          "-" if r["waiting_library_threads_cpu_per_s"] is None
          else "%.4f" % r["waiting_library_threads_cpu_per_s"]]
         for r in rows],
        title="an idle (or waiting) rank's CPU seconds per wall second (1.0 = one core busy); "
              "the last rank is the late one")
    common.print_failures(results)
    return common.emit("idle_cpu", rows, errors=common.errors_of(results))


def main(argv=None):
    args = parse_args(argv)
    return common.run_script(args, worker, report, os.path.abspath(__file__),
                             ["--seconds", args.seconds])


if __name__ == "__main__":
    sys.exit(main())
