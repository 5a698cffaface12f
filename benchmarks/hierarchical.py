"""Flat against hierarchical allreduce (HOROVOD_HIERARCHICAL_ALLREDUCE) on hosts made of
network namespaces, with every byte between hosts forced over TCP on the veths.

    sudo OMP_NUM_THREADS=1 .venv/bin/python benchmarks/hierarchical.py [--hosts 2 --ppn 2]
         [--rate 1gbit] [--all-tcp]

As root: builds the hosts (devtools/mxhorovod_devtools/netns_hosts.py), then runs this file under mpirun across
them through the ssh stand-in, with UCX_TLS=tcp,self UCX_NET_DEVICES=eth0: between hosts
TCP on the veths, within a host MPICH's shared memory, as on a cluster (``--all-tcp`` adds
MPIR_CVAR_NOLOCAL=1: TCP within a host too, over its loopback). The bytes each host sent
on its veth and loopback during the job are printed at the end. Inside the one job, rounds alternate flat and hierarchical (init, every size, shutdown), so both
see the same machine load; for each size (1 MiB to 64 MiB, float32 Sum, in place, each
call waited for) the table gives the median (min..max) time over all rounds, busbw =
2(p-1)/p x bytes / median time (nccl-tests' convention, p = all ranks, the same for both
modes) and the ratio flat / hierarchical time (above 1: hierarchical is faster). One JSON
line follows. ``--rate`` caps each host's sending rate (tc tbf on its eth0) to act like a
NIC slower than memory; without it the "network" is the kernel copying between namespaces
on the same cores, so the numbers say little about a real cluster.

Standalone for now (benchmarks/common.py, being written, will hold the shared timing and
table code).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=2, help="namespace hosts (default 2)")
    ap.add_argument("--ppn", type=int, default=2, help="ranks per host (default 2)")
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--reps", type=int, default=10, help="timed calls per size and round")
    ap.add_argument("--rounds", type=int, default=2, help="flat+hierarchical rounds")
    ap.add_argument("--rate", default=None,
                    help="cap each host's sending rate (tc tbf rate, e.g. 1gbit)")
    ap.add_argument("--all-tcp", action="store_true",
                    help="TCP also between the ranks of one host (MPIR_CVAR_NOLOCAL=1)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds for the whole job")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args()


def sizes(args):
    out, n = [], args.min_bytes
    while n <= args.max_bytes:
        out.append(n)
        n *= 2
    return out


# -- inside the job ------------------------------------------------------------------------

def measure(hvd, mx, comm, nbytes, reps, tag):
    x = mx.nd.ones((nbytes // 4,))
    name = "bench.%s.%d" % (tag, nbytes)
    hvd.allreduce_(x, op=hvd.Sum, name=name).wait_to_read()  # warm-up: negotiation, cache
    comm.Barrier()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        hvd.allreduce_(x, op=hvd.Sum, name=name).wait_to_read()
        times.append(time.perf_counter() - t0)
    return times


def worker(args):
    import mxnet as mx
    import numpy as np
    from mpi4py import MPI

    import mxhorovod as hvd
    comm = MPI.COMM_WORLD
    times = {"flat": {}, "hierarchical": {}}
    topo = None
    for rnd in range(args.rounds):
        for mode in ("flat", "hierarchical"):
            os.environ["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1" if mode == "hierarchical" else "0"
            hvd.init()
            topo = (hvd.size(), hvd.local_size(), hvd.cross_size())
            for nbytes in sizes(args):
                t = measure(hvd, mx, comm, nbytes, args.reps, "%s%d" % (mode, rnd))
                times[mode].setdefault(nbytes, []).extend(t)
            hvd.shutdown()
    if comm.rank != 0:
        return
    p = topo[0]
    factor = 2.0 * (p - 1) / p
    rows = []
    for nbytes in sizes(args):
        row = {"bytes": nbytes}
        for mode in ("flat", "hierarchical"):
            t = times[mode][nbytes]
            med = float(np.median(t))
            row[mode + "_s"] = [med, float(np.min(t)), float(np.max(t))]
            row["busbw_%s_GBps" % mode] = factor * nbytes / med / 1e9
        row["ratio"] = row["flat_s"][0] / row["hierarchical_s"][0]
        rows.append(row)
    print("ranks=%d (%d hosts x %d), TCP between hosts, %s within a host, rate cap %s; median "
          "(min..max) ms per allreduce over %d calls; busbw GB/s" % (
              p, topo[2], topo[1], "TCP" if args.all_tcp else "shared memory",
              args.rate or "none", args.reps * args.rounds))
    print("%10s %28s %28s %8s %8s %6s" % ("bytes", "flat ms", "hierarchical ms", "bw flat",
                                          "bw hier", "ratio"))
    for r in rows:
        f = lambda t: "%8.2f (%7.2f..%8.2f)" % tuple(v * 1e3 for v in t)
        print("%10d %28s %28s %8.3f %8.3f %6.2f" % (
            r["bytes"], f(r["flat_s"]), f(r["hierarchical_s"]), r["busbw_flat_GBps"],
            r["busbw_hierarchical_GBps"], r["ratio"]))
    print(json.dumps({"benchmark": "hierarchical_allreduce", "ranks": p, "hosts": topo[2],
                      "ranks_per_host": topo[1], "rate": args.rate, "all_tcp": args.all_tcp,
                      "rows": rows}), flush=True)


# -- outside: build the hosts and launch -----------------------------------------------------

def driver(args):
    from mxhorovod_devtools.netns_hosts import NetnsHosts, NetnsUnavailable
    try:
        with NetnsHosts(args.hosts) as hosts:
            if args.rate:
                hosts.limit_rate(args.rate)
            env = dict(os.environ, **hosts.network_env(within_host_tcp=args.all_tcp))
            env.setdefault("OMP_NUM_THREADS", "1")
            env["PYTHONPATH"] = os.pathsep.join(
                [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
            argv = [sys.executable, os.path.abspath(__file__), "--worker"] + sys.argv[1:]
            lo_before = hosts.loopback_bytes()
            proc = hosts.run_cmd(hosts.mpirun_cmd(hosts.hosts, argv, ppn=args.ppn),
                                 timeout=args.timeout, env=env)
            lo_after = hosts.loopback_bytes()
    except NetnsUnavailable as e:
        sys.exit("benchmarks/hierarchical.py needs network namespaces: %s" % e)
    sys.stdout.write(proc.stdout)
    for h in sorted(lo_after):
        sent = proc.counters_after[h][1] - proc.counters_before[h][1]
        print("%s sent %.1f MiB on its veth (to other hosts), %.1f MiB on its loopback" % (
            h, sent / 2**20, (lo_after[h] - lo_before[h]) / 2**20))
    sys.exit(proc.returncode)

if __name__ == "__main__":
    a = parse()
    worker(a) if a.worker else driver(a)
