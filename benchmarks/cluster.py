"""Allreduce across hosts against the TCP floor, on hosts made of network namespaces.

    sudo OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cluster.py
         [--settings 2x2@1gbit,3x1@1gbit,2x2@200mbit,3x1@200mbit] [--reps 3]
         [--payloads 64MiB,resnet50] [--horovod-python PY] [--quick]

As root. For each setting HxP@RATE: builds H hosts (devtools/mxhorovod_devtools/netns_hosts.py), caps what each
host sends on its eth0 at RATE (``tc tbf rate RATE burst 256kb latency 50ms``), and runs:

- **tcp floor**: plain TCP (Python sockets, one process per host) moving the bytes each
  host must send for an allreduce, 2(H-1)/H x payload, around a ring of the hosts, every
  host at once, through the same caps. Time from the common start to the last byte
  received anywhere. No allreduce can do better on these links.
- one mpirun across the hosts (P ranks each, ``UCX_TLS=tcp,self UCX_NET_DEVICES=eth0``:
  TCP between hosts, MPICH's shared memory within a host, as on a cluster) that times
  **mpi4py** ``Allreduce`` (in place, float32 Sum, the payload as one contiguous numpy
  array, before ``hvd.init()``), then mxhorovod with ``HOROVOD_HIERARCHICAL_ALLREDUCE``
  unset (**default**: the library picks by topology), ``=0`` (**flat**) and ``=1``
  (**hierarchical**), each after its own ``hvd.init()``.
- with ``--horovod-python``: the same job under that Python with ``import horovod.mxnet``
  (rows **horovod flat** and **horovod hierarchical**).

Payloads: ``64MiB`` (one float32 tensor, ``hvd.allreduce_``, waited for) and ``resnet50``
(every gradient of gluon's resnet50_v1, 102 MB, through ``DistributedTrainer.
allreduce_grads()`` then ``mx.nd.waitall()``; mpi4py reduces the same bytes as one array).

Each row gives the median (min..max) over --reps timed calls after one warm-up, the ratio
of the median to the TCP floor's median, and the bytes each host sent on its eth0 per
call. A row **counts** only if every host sent at least 2(H-1)/H x payload (half of it for
an fp16 row): less means bytes went between the namespace "hosts" another way (shared memory, cross-memory attach:
one kernel), which a real cluster cannot do. Prints a table per setting and one JSON line.
``--modes ...,adasum``: the payload reduced with ``op=hvd.Adasum`` (one ``allreduce_``
per tensor, random values); it counts when every host sent the payload once (Adasum's
tree sends whole vectors).
``--quick`` (the smoke test): 2x1@1gbit, a 1 MiB payload, rows default and flat, 1 rep.
(``resnet50-K`` as a payload: ResNet-50's first K gradient shapes, one ``allreduce_`` each.)
"""
import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20

# The TCP floor's per-host program: listens on its own address, connects to the next host,
# then at START sends NBYTES to it while receiving NBYTES from the previous host; prints
# the time its receive and its send ended.
TCP_FLOOR_PROGRAM = r"""
import socket, sys, threading, time
me, nxt, port, nbytes, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((me, port)); srv.listen(1)
got = {}
def recv():
    c, _ = srv.accept(); left = nbytes; buf = bytearray(1 << 20); view = memoryview(buf)
    while left > 0:
        n = c.recv_into(view, min(left, len(buf)))
        if n == 0: raise SystemExit("connection closed with %d bytes left" % left)
        left -= n
    got["end"] = time.time(); c.close()
t = threading.Thread(target=recv); t.start()
deadline = time.time() + 20
while True:
    try:
        s = socket.create_connection((nxt, port), timeout=5); break
    except OSError:
        if time.time() > deadline: raise
        time.sleep(0.02)
block = memoryview(bytearray(4 << 20)); left = nbytes
time.sleep(max(0.0, start - time.time()))
while left > 0:
    n = min(left, len(block)); s.sendall(block[:n]); left -= n
sent = time.time(); s.close(); t.join()
print("TCPFLOOR", got["end"], sent, flush=True)
"""


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", default="2x2@1gbit,3x1@1gbit,2x2@200mbit,3x1@200mbit",
                    help="comma-separated HOSTSxRANKS@RATE (RATE in tc's syntax)")
    ap.add_argument("--payloads", default="64MiB,resnet50",
                    help="comma-separated: NMiB (one float32 tensor) and/or resnet50")
    ap.add_argument("--reps", type=int, default=3, help="timed calls per row (after a warm-up)")
    ap.add_argument("--modes", default="default,flat,hierarchical",
                    help="mxhorovod rows: default (HOROVOD_HIERARCHICAL_ALLREDUCE unset), "
                         "flat (=0), hierarchical (=1), adasum (one op=hvd.Adasum allreduce_ "
                         "per tensor, default topology)")
    ap.add_argument("--fp16", action="store_true",
                    help="also a row with Compression.fp16 (default mode)")
    ap.add_argument("--train", action="store_true",
                    help="also training rows (default mode): ResNet-50 v1, synthetic data, "
                         "batch --batch per rank: compute-only step C, exchange-only E, step T "
                         "and the overlap 1 - (T - C) / E, beside the most the gradient "
                         "order allows (from a timeline of 3 more steps: overlap_bound.py)")
    ap.add_argument("--batch", type=int, default=8, help="batch per rank of --train")
    ap.add_argument("--accumulate", default="",
                    help="with --train: comma-separated k > 1; a row per k, 'train step T "
                         "k=K': K backward passes of --batch, then one step "
                         "(backward_passes_per_step=K); compare its time / K with T")
    ap.add_argument("--horovod-python", default=None,
                    help="a Python with horovod.mxnet (and mpich, mpi4py): Horovod rows")
    ap.add_argument("--env", action="append", default=[],
                    help="NAME=VALUE for every rank (repeatable), e.g. MXHOROVOD_BLOCKING_DATA=1")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per mpirun job")
    ap.add_argument("--job-log", metavar="FILE",
                    help="append each job's output (the ranks' stdout and stderr: with "
                         "HOROVOD_LOG_LEVEL=debug, the measured link rate) to FILE")
    ap.add_argument("--quick", action="store_true", help="smoke test: tiny, 2x1@1gbit")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--impl", default="mxhorovod", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.settings, args.payloads, args.reps = "2x1@1gbit", "1MiB", 1
        args.modes = "default,flat"
    args.settings = [parse_setting(s) for s in args.settings.split(",") if s]
    args.payloads = [p for p in args.payloads.split(",") if p]
    args.modes = [m for m in args.modes.split(",") if m]
    args.accumulate = [int(k) for k in args.accumulate.split(",") if k]
    if any(k < 2 for k in args.accumulate):
        ap.error("--accumulate takes k >= 2")
    for m in args.modes:
        if m not in ("default", "flat", "hierarchical", "adasum"):
            ap.error("unknown mode %r" % m)
    return args


def parse_setting(text):
    try:
        shape, rate = text.split("@")
        h, p = (int(x) for x in shape.lower().split("x"))
    except ValueError:
        raise SystemExit("--settings: %r is not HOSTSxRANKS@RATE (e.g. 2x2@1gbit)" % text)
    if h < 2 or p < 1:
        raise SystemExit("--settings: %r needs at least 2 hosts and 1 rank each" % text)
    return {"hosts": h, "ppn": p, "rate": rate, "name": text}


def payload_bytes(name):
    """Bytes of a payload: NMiB, resnet50 (every resnet50_v1 gradient) or resnet50-K (its
    first K gradient shapes)."""
    if name.lower().endswith("mib"):
        return int(float(name[:-3]) * MiB)
    import common
    shapes = [s for _, s in common.resnet50_gradient_shapes(conv_biases=True)]
    if name.startswith("resnet50-"):
        shapes = shapes[:int(name.split("-")[1])]
    n = 0
    for s in shapes:
        k = 1
        for d in s:
            k *= d
        n += k
    return 4 * n


def stats(times):
    return {"median": statistics.median(times), "min": min(times), "max": max(times),
            "reps": len(times), "all": list(times)}


# -- inside the job ------------------------------------------------------------------------

def eth0_sent():
    """Bytes this host's eth0 has sent (the namespace's own /sys)."""
    try:
        with open("/sys/class/net/eth0/statistics/tx_bytes") as f:
            return int(f.read())
    except OSError:
        return -1


def machine_busy_s():
    """CPU seconds this machine's cores have been busy since boot (/proc/stat: user, nice,
    system, irq, softirq, steal), every process and the kernel's own work: on namespace
    hosts, both hosts' TCP stacks and the veths run on the same cores as the ranks."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    busy = sum(fields[:3]) + sum(fields[5:8])  # skip idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


class Job:
    """One rank's view: its communicator, its host, and the per-host byte counters."""

    def __init__(self):
        import socket

        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.host = socket.gethostname()
        hosts = self.comm.allgather(self.host)
        self.hosts = sorted(set(hosts))
        self.leader = hosts.index(self.host) == self.comm.rank  # first rank of its host

    def sent(self):
        """{host: eth0 bytes sent so far}, the same on every rank."""
        mine = (self.host, eth0_sent()) if self.leader else None
        return dict(x for x in self.comm.allgather(mine) if x)

    def row(self, step, reps):
        """Warm-up, then ``reps`` timed calls of ``step`` (all ranks start together);
        returns (time stats, {host: bytes sent per call}, CPU seconds per call, the
        machine's busy CPU seconds per call)."""
        return tuple(x[0] for x in self.rows([step], reps))

    def rows(self, steps, reps):
        """Like row() for several steps, run in turn within each repetition (C, E, T, C,
        E, T, ...: a drift of the machine's speed reaches each alike). Returns lists: time
        stats, {host: bytes sent per call}, CPU seconds per call (this process's threads,
        the most of any rank) and the machine's busy CPU seconds per call (rank 0's
        reading: every namespace host shares the machine) of each step."""
        for step in steps:
            step()
        times = [[] for _ in steps]
        sent = [dict() for _ in steps]
        cpu = [0.0 for _ in steps]
        machine = [0.0 for _ in steps]
        for _ in range(reps):
            for i, step in enumerate(steps):
                self.comm.Barrier()
                before = self.sent()
                self.comm.Barrier()
                m0 = machine_busy_s()
                c0, t0 = time.process_time(), time.perf_counter()
                step()
                t1, c1 = time.perf_counter(), time.process_time()
                machine[i] += (machine_busy_s() - m0) / reps
                times[i].append(self.comm.allreduce(t1 - t0, op=self.MPI.MAX))
                cpu[i] += self.comm.allreduce(c1 - c0, op=self.MPI.MAX) / reps
                after = self.sent()
                for h in after:
                    sent[i][h] = sent[i].get(h, 0) + (after[h] - before[h]) / reps
        return [stats(t) for t in times], sent, cpu, self.comm.bcast(machine, root=0)


def mpi4py_step(job, nbytes):
    import numpy as np
    a = np.ones(nbytes // 4, dtype=np.float32)

    def step():
        job.comm.Allreduce(job.MPI.IN_PLACE, a, op=job.MPI.SUM)
    return step


def hvd_steps(hvd, mx, payload, nets, fp16=False, adasum=False):
    """The step of a payload: one allreduce_ of a tensor, or allreduce_grads() of
    DistributedTrainer over resnet50_v1's gradients (resnet50-K: the first K gradient
    shapes as tensors, one allreduce_ each). ``adasum``: one ``op=hvd.Adasum`` allreduce_
    per tensor (random values) instead."""
    if adasum:
        if payload.lower().endswith("mib"):
            shapes = [(payload_bytes(payload) // 4,)]
        else:
            net = nets["resnet50"]
            shapes = [p.shape for p in net.collect_params().values() if p.grad_req != "null"]
        arrays = [mx.nd.random.normal(shape=s) for s in shapes]

        def step():
            for i, a in enumerate(arrays):
                hvd.allreduce_(a, op=hvd.Adasum, name="cluster.adasum.%d" % i)
            mx.nd.waitall()
        return step
    if payload.lower().endswith("mib"):
        x = mx.nd.ones((payload_bytes(payload) // 4,))

        def step():
            hvd.allreduce_(x, op=hvd.Sum, name="cluster.%s" % payload).wait_to_read()
        return step
    if payload.startswith("resnet50-"):
        import common
        shapes = [s for _, s in common.resnet50_gradient_shapes(conv_biases=True)]
        arrays = [mx.nd.ones(s) for s in shapes[:int(payload.split("-")[1])]]

        def step():
            for i, a in enumerate(arrays):
                hvd.allreduce_(a, op=hvd.Sum, name="cluster.g%d" % i)
            mx.nd.waitall()
        return step
    kw = {"compression": hvd.Compression.fp16} if fp16 else {}
    trainer = hvd.DistributedTrainer(nets["resnet50"].collect_params(), "sgd",
                                     {"learning_rate": 0.0}, **kw)

    def step():
        trainer.allreduce_grads()
        mx.nd.waitall()
    return step


def worker(args):
    import mxnet as mx
    import common
    job = Job()
    hvd = common.load_hvd(args.impl)
    nets = {}
    if "resnet50" in args.payloads:
        net = mx.gluon.model_zoo.vision.resnet50_v1()
        net.initialize()
        with mx.autograd.record():  # shapes final; training mode (no MKLDNN reorder)
            net(mx.nd.zeros((1, 3, 32, 32)))
        nets["resnet50"] = net
    rows = []
    for payload in args.payloads:
        nbytes = payload_bytes(payload)
        t, sent, cpu, machine = job.row(mpi4py_step(job, nbytes), args.reps)
        rows.append({"row": "mpi4py Allreduce", "payload": payload, "bytes": nbytes,
                     "time_s": t, "sent": sent, "cpu_s": cpu, "machine_cpu_s": machine})
    modes = [(m, False) for m in args.modes] if args.impl == "mxhorovod" else \
        [("flat", False), ("hierarchical", False)]
    if args.fp16 and args.impl == "mxhorovod":
        modes.append(("default", True))
    for mode, fp16 in modes:
        if mode in ("default", "adasum"):
            os.environ.pop("HOROVOD_HIERARCHICAL_ALLREDUCE", None)
        else:
            os.environ["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1" if mode == "hierarchical" else "0"
        hvd.init()
        for payload in args.payloads:
            if fp16 and not payload.startswith("resnet50"):
                continue
            t, sent, cpu, machine = job.row(
                hvd_steps(hvd, mx, payload, nets, fp16, adasum=mode == "adasum"), args.reps)
            name = ("horovod " if args.impl == "horovod" else "") + mode + (" fp16" if fp16 else "")
            # float16 on the wire: half the payload's bytes must cross.
            rows.append({"row": name, "payload": payload,
                         "bytes": payload_bytes(payload) // (2 if fp16 else 1),
                         "time_s": t, "sent": sent, "cpu_s": cpu, "machine_cpu_s": machine})
        hvd.shutdown()
    if args.train and args.impl == "mxhorovod":
        rows += train_rows(job, hvd, mx, args)
    if job.comm.rank == 0:
        print("CLUSTER_JSON " + json.dumps({"impl": args.impl, "rows": rows}), flush=True)


def train_rows(job, hvd, mx, args):
    """ResNet-50 v1 steps on synthetic data (HOROVOD_HIERARCHICAL_ALLREDUCE unset): C, a
    step with a plain gluon Trainer (no exchange); E, DistributedTrainer.allreduce_grads()
    alone; T, a DistributedTrainer step (the exchange overlaps backward where the gradient
    order allows). Overlap = 1 - (T - C) / E: 1 when the exchange is fully hidden."""
    os.environ.pop("HOROVOD_HIERARCHICAL_ALLREDUCE", None)
    net = mx.gluon.model_zoo.vision.resnet50_v1(classes=1000)
    net.initialize(mx.init.Xavier())
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    x = mx.nd.random.uniform(shape=(args.batch, 3, 224, 224))
    y = mx.nd.array(list(range(args.batch)))
    with mx.autograd.record():
        net(x)  # shapes final before any trainer
    hvd.init()
    plain = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    prefix = "train.grad."
    dist = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.001},
                                  prefix=prefix)

    def step(trainer):
        def run():
            with mx.autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(args.batch)
            mx.nd.waitall()
        return run

    def exchange():
        dist.allreduce_grads()
        mx.nd.waitall()
    names = ("train compute C", "train exchange E", "train step T")
    times, sent, cpu, machine = job.rows([step(plain), exchange, step(dist)], args.reps)
    # The overlap the gradient order allows (overlap_bound.py), from a timeline of 3 more
    # steps (rank 0 writes it; the other ranks' calls do nothing).
    path = os.path.join(tempfile.mkdtemp(prefix="cluster_tl"), "steps.json")
    hvd.start_timeline(path, mark_cycles=False)
    for _ in range(3):
        job.comm.Barrier()
        step(dist)()
    hvd.stop_timeline()
    # Gradient accumulation: K passes, one step (after the rows above: its trainer turns
    # the gradients to grad_req 'add').
    accumulated = []
    for k in args.accumulate:
        acc = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.001},
                                     prefix="train.acc%d." % k, backward_passes_per_step=k)

        def passes(acc=acc, k=k):
            for _ in range(k):
                with mx.autograd.record():
                    loss = loss_fn(net(x), y)
                loss.backward()
            acc.step(k * args.batch)
            mx.nd.waitall()
        accumulated.append(("train step T k=%d" % k, passes))
    acc_rows = job.rows([fn for _, fn in accumulated], args.reps) if accumulated else \
        ([], [], [], [])
    bound = None
    if job.comm.rank == 0:
        from mxhorovod.timeline import load
        from overlap_bound import overlap_bound
        # Gradient i of the trainer's parameter list (gluon's Trainer._params, sorted by
        # name) is the collective "<prefix>i".
        sizes = {"%s%d" % (prefix, i): p.grad().size * 4
                 for i, p in enumerate(dist._params) if p.grad_req != "null"}
        bound = overlap_bound(load(path), sizes, times[1]["median"])
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    hvd.shutdown()
    out = [{"row": name, "payload": "resnet50", "bytes": payload_bytes("resnet50"),
            "time_s": t, "sent": s, "cpu_s": c, "machine_cpu_s": m, "batch": args.batch}
           for name, t, s, c, m in zip(names, times, sent, cpu, machine)]
    acc_out = [{"row": name, "payload": "resnet50", "bytes": payload_bytes("resnet50"),
                "time_s": t, "sent": s, "cpu_s": c, "machine_cpu_s": m, "batch": args.batch,
                "passes": k}
               for (name, _), k, t, s, c, m in zip(accumulated, args.accumulate, *acc_rows)]
    # T - C from the pairs of one repetition (run one after the other): a drift of the
    # machine's speed between repetitions cancels out.
    c, e, t = (r["time_s"]["all"] for r in out)
    hidden = 1 - statistics.median(ti - ci for ci, ti in zip(c, t)) / statistics.median(e)
    for r in out:
        r["overlap"] = hidden
        r["overlap_bound"] = bound
    return out + acc_out


# -- outside: hosts, caps, floors, jobs ------------------------------------------------------

_FLOOR_PORTS = itertools.count(47000)


def tcp_floor(hosts, nbytes, reps):
    """Seconds for every host to send ``nbytes`` to the next host around the ring while
    receiving as many from the previous one (plain TCP), ``reps`` times: stats. Each round
    has its own port and a bound (60 s plus the bytes at 10 Mbit/s); a round past it is
    killed and run again, once."""
    times = []
    names = hosts.hosts
    bound = 60 + nbytes * 8 / 10e6
    for rep in range(reps + 1):  # the first one warms up (ARP, the bucket filling)
        for attempt in (1, 2):
            start = time.time() + 1.0 + 0.1 * len(names)
            port = next(_FLOOR_PORTS)
            procs = []
            for i, h in enumerate(names):
                nxt = names[(i + 1) % len(names)]
                cmd = ["ip", "netns", "exec", hosts.netns[h], sys.executable, "-c",
                       TCP_FLOOR_PROGRAM, hosts.address[h], hosts.address[nxt], str(port),
                       str(nbytes), repr(start)]
                procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True))
            ends = []
            try:
                for p in procs:
                    out, _ = p.communicate(timeout=max(1.0, start + bound - time.time()))
                    line = [x for x in out.splitlines() if x.startswith("TCPFLOOR")]
                    if p.returncode != 0 or not line:
                        raise RuntimeError("TCP floor program failed:\n" + out[-3000:])
                    ends.extend(float(v) for v in line[0].split()[1:])
                break
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                    p.wait()
                if attempt == 2:
                    raise RuntimeError("TCP floor: a round of %d bytes per host took more "
                                       "than %.0f s twice" % (nbytes, bound))
                print("TCP floor: a round took more than %.0f s; run again" % bound,
                      flush=True)
        if rep:
            times.append(max(ends) - start)
    return stats(times)


def run_job(hosts, setting, args, python, impl):
    env = dict(os.environ, **hosts.network_env(within_host_tcp=False))
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    if impl == "mxhorovod":
        env["PYTHONPATH"] = os.pathsep.join(
            [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    for kv in args.env:
        k, _, v = kv.partition("=")
        env[k] = v
    argv = [python, os.path.abspath(__file__), "--worker", "--impl", impl,
            "--payloads", ",".join(args.payloads), "--reps", str(args.reps),
            "--modes", ",".join(args.modes), "--batch", str(args.batch),
            "--accumulate", ",".join(str(k) for k in args.accumulate)] + \
        (["--fp16"] if args.fp16 else []) + (["--train"] if args.train else [])
    cmd = hosts.mpirun_cmd(hosts.hosts, ["-genvall"] + argv, ppn=setting["ppn"])
    if python != sys.executable:  # that Python's own mpirun
        cmd[0] = os.path.join(os.path.dirname(python), "mpirun")
    proc = hosts.run_cmd(cmd, timeout=args.timeout, env=env)
    if args.job_log:
        with open(args.job_log, "a") as f:
            f.write("== %s %s %s\n%s\n" % (setting["name"], impl, " ".join(args.env), proc.stdout))
    lines = [x for x in proc.stdout.splitlines() if x.startswith("CLUSTER_JSON ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError("%s job failed (exit %s):\n%s" % (impl, proc.returncode,
                                                              proc.stdout[-4000:]))
    return json.loads(lines[-1][len("CLUSTER_JSON "):])["rows"]


def fmt(s):
    return "%8.1f (%7.1f..%8.1f)" % (s["median"] * 1e3, s["min"] * 1e3, s["max"] * 1e3)


def run_setting(setting, args):
    from mxhorovod_devtools.netns_hosts import NetnsHosts
    h = setting["hosts"]
    share = 2.0 * (h - 1) / h
    out = {"setting": setting["name"], "hosts": h, "ranks_per_host": setting["ppn"],
           "rate": setting["rate"], "floors": {}, "rows": [], "errors": []}
    with NetnsHosts(h) as hosts:
        hosts.limit_rate(setting["rate"])
        # (--train: its exchange is ResNet-50's gradients, judged against their floor.)
        for payload in args.payloads + (["resnet50"] if args.train and "resnet50" not in
                                        args.payloads else []):
            out["floors"][payload] = tcp_floor(hosts, int(share * payload_bytes(payload)),
                                               args.reps)
        jobs = [(sys.executable, "mxhorovod")]
        if args.horovod_python:
            jobs.append((args.horovod_python, "horovod"))
        for python, impl in jobs:
            try:
                out["rows"] += run_job(hosts, setting, args, python, impl)
            except (RuntimeError, AssertionError) as e:
                out["errors"].append("%s: %s" % (impl, str(e)[-2000:]))
    for r in out["rows"]:
        floor = out["floors"][r["payload"]]
        r["ratio"] = r["time_s"]["median"] / floor["median"]
        # Adasum's tree: every host sends its whole vector once (up, or the broadcast).
        need = (1.0 if r["row"] == "adasum" else share) * r["bytes"]
        r["counts"] = all(v >= need for v in r["sent"].values()) and len(r["sent"]) == h
        if r["row"] == "train compute C":  # no exchange: neither applies
            r["ratio"] = r["counts"] = None
    return out


def report(res):
    print("\n%s: %d hosts x %d ranks, each host's eth0 capped at %s; median (min..max) ms; "
          "ratio = median / TCP floor's median; sent = MiB each host sent per call "
          "(must be >= %.2f x payload); cpu = CPU seconds per call of a rank's threads "
          "(the most of any rank); machine = of every core (the kernel's network path "
          "included)" % (res["setting"], res["hosts"], res["ranks_per_host"],
                                            res["rate"], 2.0 * (res["hosts"] - 1) / res["hosts"]))
    print("%-26s %-10s %28s %7s  %-24s %-6s %-5s %s" % (
        "row", "payload", "ms", "ratio", "sent MiB", "counts", "cpu s", "machine s"))
    for payload, f in res["floors"].items():
        print("%-26s %-10s %28s %7.2f  %-24s %-6s %-5s %s" % ("tcp floor", payload, fmt(f), 1.0,
                                                              "-", "-", "-", "-"))
    for r in res["rows"]:
        sent = " ".join("%.1f" % (r["sent"][hh] / MiB) for hh in sorted(r["sent"]))
        machine = r.get("machine_cpu_s")
        print("%-26s %-10s %28s %7s  %-24s %-6s %-5.2f %s" % (
            r["row"], r["payload"], fmt(r["time_s"]),
            "-" if r["ratio"] is None else "%.2f" % r["ratio"], sent,
            "-" if r["counts"] is None else "yes" if r["counts"] else "NO", r["cpu_s"],
            "-" if machine is None else "%.2f" % machine))
    ov = [r for r in res["rows"] if "overlap" in r]
    if ov:
        print("training (ResNet-50 v1, batch %d per rank): overlap 1 - (T - C) / E = %.2f "
              "(T - C: the median of the repetitions' differences)"
              % (ov[0]["batch"], ov[0]["overlap"]))
        if ov[0].get("overlap_bound") is not None:
            print("the gradient order allows at most %.2f (each gradient sent at E's rate "
                  "from when every rank has it, one after another: overlap_bound.py)"
                  % ov[0]["overlap_bound"])
        e = [r for r in ov if r["row"] == "train exchange E"][0]
        if e.get("machine_cpu_s") is not None:
            print("E alone keeps the machine's cores busy %.2f CPU s per call: the ranks' "
                  "threads (%.2f s at most per rank) and the kernel's network path, which on "
                  "namespace hosts runs on the cores backward uses"
                  % (e["machine_cpu_s"], e["cpu_s"]))
    for e in res["errors"]:
        print("error: " + e)


def driver(args):
    from mxhorovod_devtools.netns_hosts import NetnsUnavailable
    import common
    results = []
    try:
        for setting in args.settings:
            res = run_setting(setting, args)
            report(res)
            results.append(res)
    except NetnsUnavailable as e:
        sys.exit("benchmarks/cluster.py needs network namespaces (root): %s" % e)
    common.emit("cluster", [dict(r, setting=res["setting"]) for res in results for r in res["rows"]],
                settings=[{k: v for k, v in res.items() if k != "rows"} for res in results],
                errors=[e for res in results for e in res["errors"]])
    return 1 if any(res["errors"] for res in results) else 0


if __name__ == "__main__":
    a = parse()
    if a.worker:
        worker(a)
    else:
        sys.exit(driver(a))
