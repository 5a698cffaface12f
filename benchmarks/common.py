"""Helpers shared by the benchmark scripts: timing, output, launching, the gradient set.

Every figure is the median of repeated runs with its min and max (:func:`timed`); every
comparison is a ratio of two figures measured in the same run. A script that needs several
launches (configurations, Horovod, scaling) is started once with plain ``python`` and
starts ``mpirun`` itself (:func:`launch`); its ranks print one ``BENCH_JSON {...}`` line
(rank 0), which the starting process collects. Each script prints a table and, as its last
line, one JSON object ``{"benchmark": ..., "machine": ..., "rows": [...]}``.
"""
import argparse
import datetime
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLES = os.path.join(ROOT, "examples")

RESULT_PREFIX = "BENCH_JSON "

# Launch configurations: each is a set of environment variables given to every rank, so
# the value of each mechanism is measured, not assumed. Variables as Horovod names them.
CONFIGS = {
    "default": {},
    "nofusion": {"HOROVOD_FUSION_THRESHOLD": "0"},
    "nocache": {"HOROVOD_CACHE_CAPACITY": "0"},
    # mxhorovod's own: allreduce through MPI only, no cross-memory attach (no Horovod row).
    "nocma": {"MXHOROVOD_CMA": "0"},
}

MiB = 1 << 20
_LOAD_AT_START = os.getloadavg()
_TICK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- timing


def thread_cpu():
    """{tid: (name, CPU seconds)} of this process's threads (Linux /proc): the time on a CPU
    from ``schedstat`` (nanoseconds) where the kernel keeps it, else ``stat``'s utime +
    stime (clock ticks, 10 ms: too coarse for a few training steps)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        base = "/proc/self/task/%s/" % tid
        try:
            with open(base + "comm") as f:
                name = f.read().strip()
            try:
                with open(base + "schedstat") as f:
                    seconds = int(f.read().split()[0]) * 1e-9
            except (OSError, ValueError, IndexError):
                with open(base + "stat") as f:
                    stat = f.read()
                fields = stat[stat.rindex(")") + 2:].split()
                seconds = (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (name, seconds)
    return out


def stats(times):
    """{"median", "min", "max", "reps"} of a list of seconds."""
    s = sorted(times)
    n = len(s)
    median = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"median": median, "min": s[0], "max": s[-1], "reps": n}


def timed(fn, reps, warmup=1, barrier=None):
    """Runs ``fn`` ``warmup`` times untimed, then ``reps`` times timed (wall clock,
    ``time.perf_counter``); returns :func:`stats` of the timed runs, in seconds. With
    ``barrier`` (a callable, e.g. ``comm.Barrier``) the ranks line up before each run, so
    one rank's late start is not counted as the collective's time."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if barrier is not None:
            barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return stats(times)


def ratio(a, b):
    """Median of ``a`` over median of ``b`` (two :func:`stats` of the same run)."""
    return a["median"] / b["median"] if b["median"] > 0 else float("nan")


def timed_pair(fa, fb, reps, warmup=1, barrier=None):
    """:func:`timed` of ``fa`` and ``fb`` in alternation (a, b, a, b, ...), so both see the
    same drift of a noisy machine; returns (stats of fa, stats of fb)."""
    for _ in range(warmup):
        fa()
        fb()
    times = ([], [])
    for _ in range(reps):
        for fn, out in ((fa, times[0]), (fb, times[1])):
            if barrier is not None:
                barrier()
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return stats(times[0]), stats(times[1])


def either_op(table, strategy):
    """Of a floors.measure() table: the faster of ``strategy`` with MPI's built-in sum and
    with the user-defined one (``strategy + '_userop'``), as stats naming its ``strategy``."""
    k = min((strategy, strategy + "_userop"), key=lambda k: table[k]["median"])
    return dict(table[k], strategy=k)


def busbw(nbytes, seconds, size):
    """Bus bandwidth of an allreduce in GB/s: 2(p-1)/p x bytes / time (nccl-tests'
    convention, see their PERFORMANCE.md); bytes / time on one rank."""
    factor = 2.0 * (size - 1) / size if size > 1 else 1.0
    return factor * nbytes / seconds / 1e9


# ---------------------------------------------------------------- output


def fmt_ms(s, digits=3):
    """'median (min..max)' of a :func:`stats` dict, in milliseconds."""
    if s is None:
        return "-"
    return "%.*f (%.*f..%.*f)" % (digits, s["median"] * 1e3, digits, s["min"] * 1e3,
                                  digits, s["max"] * 1e3)


def print_table(headers, rows, title=None):
    """Prints rows (lists of already formatted cells) under headers, columns aligned:
    the first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths)))
    if title:
        print(title)
    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for r in cells[1:]:
        print(line(r))
    sys.stdout.flush()


def machine():
    """What the figures were measured on: host, CPUs, the 1/5/15-minute load averages when
    the script started and now (a load above the CPU count means other jobs shared the
    machine), date (UTC)."""
    return {"host": platform.node(), "cpus": os.cpu_count(), "processor": platform.machine(),
            "python": platform.python_version(),
            "loadavg_start": [round(x, 2) for x in _LOAD_AT_START],
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def emit(benchmark, rows, **extra):
    """Prints the final JSON line: {"benchmark", "machine", **extra, "rows"}."""
    obj = {"benchmark": benchmark, "machine": machine()}
    obj.update(extra)
    obj["rows"] = rows
    print(json.dumps(obj), flush=True)
    return obj


def emit_result(obj):
    """A rank's result for the launching process: one prefixed JSON line."""
    print(RESULT_PREFIX + json.dumps(obj), flush=True)


# ---------------------------------------------------------------- launching


def under_mpirun():
    """True inside a rank started by mpirun (MPICH's Hydra, Open MPI or PMIx)."""
    return any(v in os.environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"))


def mpirun_for(python):
    """The mpirun next to ``python`` (the venv's mpich wheel)."""
    cand = os.path.join(os.path.dirname(python), "mpirun")
    if not os.path.exists(cand):
        raise RuntimeError("no mpirun next to %s: pip install mpich into that venv" % python)
    return cand


def rank_env(extra=None):
    """The environment for launched processes: one OpenMP and one engine thread per
    process unless already set (ranks share the cores), this checkout first on
    PYTHONPATH (its mxhorovod, even where the venv's editable install is another
    checkout's) and its examples/ (scaling.py's ranks build the MNIST example's model),
    plus ``extra``."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT, EXAMPLES] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                            if p and p not in (ROOT, EXAMPLES)])
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def start(cmd, env, group=None):
    """Popen in a new session (``group=None``), a new process group of this session
    (``group=0``) or the existing group ``group`` of this session, so that
    :func:`kill_group` ends it with every child (mpirun's ranks, servers). Output goes to
    a temporary file (no pipe to fill while another process is waited for)."""
    kw = {"process_group": group} if group is not None else {"start_new_session": True}
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                            **kw)
    proc.pgid = proc.pid if not group else group
    proc.log = log
    return proc


def kill_group(proc):
    """SIGKILL to the process group ``proc`` was started in (see :func:`start`)."""
    try:
        os.killpg(proc.pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def output_of(proc):
    proc.log.seek(0)
    return proc.log.read()


def results_of(out):
    """The JSON objects of the ``BENCH_JSON`` lines in a process's output."""
    return [json.loads(line[len(RESULT_PREFIX):]) for line in out.splitlines()
            if line.startswith(RESULT_PREFIX)]


def finish(procs, timeout, what):
    """Waits for all ``procs`` (started by :func:`start`) within ``timeout`` seconds in all.
    On timeout or a non-zero exit kills every group and raises RuntimeError with that
    process's output tail; in all cases no process is left behind. Returns the outputs."""
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RuntimeError("%s: timed out after %ds\n%s"
                                   % (what, timeout, output_of(p)[-4000:])) from None
            if p.returncode != 0:
                raise RuntimeError("%s: exit %d\n%s"
                                   % (what, p.returncode, output_of(p)[-4000:]))
        return [output_of(p) for p in procs]
    finally:
        for p in procs:
            kill_group(p)  # also what a finished mpirun or scheduler left behind
            p.wait()
            p.log.close()


def mpirun_cmd(np_, python, script, args):
    return [mpirun_for(python), "-np", str(np_), python, script] + [str(a) for a in args]


def launch(np_, script, args, python=None, env=None, timeout=600):
    """Runs ``python script args`` on ``np_`` ranks under ``python``'s mpirun with the
    environment :func:`rank_env` (``env`` added); returns the first ``BENCH_JSON`` object
    it printed. Raises RuntimeError (with the output's tail) on failure, timeout or no
    result; every process is killed in all cases."""
    python = python or sys.executable
    cmd = mpirun_cmd(np_, python, script, args)
    out, = finish([start(cmd, rank_env(env))], timeout, " ".join(cmd))
    res = results_of(out)
    if not res:
        raise RuntimeError("%s printed no result\n%s" % (" ".join(cmd), out[-4000:]))
    return res[0]


# ---------------------------------------------------------------- implementations


def horovod_python(arg):
    """The Python to run Horovod rows with: ``arg`` if given, else this Python when it can
    import horovod.mxnet, else None (no Horovod rows)."""
    if arg:
        if not os.path.exists(arg):
            raise SystemExit("--horovod-python %s: no such file" % arg)
        return arg
    try:
        if importlib.util.find_spec("horovod") and importlib.util.find_spec("horovod.mxnet"):
            return sys.executable
    except (ImportError, ValueError):
        pass
    return None


def load_hvd(impl):
    """The collective module: ``mxhorovod`` or ``horovod.mxnet`` (the same API)."""
    if impl == "horovod":
        import horovod.mxnet as hvd
    elif impl == "mxhorovod":
        import mxhorovod as hvd
    else:
        raise ValueError("unknown implementation %r" % impl)
    return hvd


def config_list(text):
    """argparse type of --configs: a comma-separated list of names of CONFIGS."""
    names = [c for c in text.split(",") if c]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError("unknown configuration %r (known: %s)"
                                         % (",".join(unknown), ", ".join(CONFIGS)))
    return names


def add_launch_args(ap, configs=("default", "nofusion", "nocache")):
    """Options of a script that launches its own mpirun runs."""
    ap.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--configs", type=config_list, default=list(configs),
                    help="comma-separated launch configurations among %s "
                         "(nofusion: HOROVOD_FUSION_THRESHOLD=0, nocache: "
                         "HOROVOD_CACHE_CAPACITY=0, nocma: MXHOROVOD_CMA=0, no Horovod "
                         "row)" % ", ".join(CONFIGS))
    ap.add_argument("--horovod-python", default=None,
                    help="a Python that imports horovod.mxnet (e.g. /work/hvd-venv/bin/python)"
                         "; default: this Python if it can")
    ap.add_argument("--no-horovod", action="store_true", help="no Horovod rows")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per launch")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--impl", default="mxhorovod", choices=["mxhorovod", "horovod"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--config", default=None, help=argparse.SUPPRESS)


def runs(args):
    """[(impl, config, python)] to launch: per configuration, mxhorovod, then Horovod (if
    available and the configuration is one of HOROVOD_* variables) right after it, so the
    two launches compared raw are minutes closer than with all of one library first (the
    machine drifts by 30% and more between launches; floor-normalized ratios do not)."""
    hp = None if args.no_horovod else horovod_python(args.horovod_python)
    out = []
    for c in args.configs:
        out.append(("mxhorovod", c, sys.executable))
        if hp and all(k.startswith("HOROVOD_") for k in CONFIGS[c]):
            out.append(("horovod", c, hp))
    return out


def launch_all(args, script, worker_args):
    """Launches ``script --worker`` once per (impl, config) of :func:`runs`; returns the
    list of results, each with "impl" and "config" set. A launch that fails is reported on
    stderr and recorded as {"impl", "config", "error"} (a Horovod failure must not hide
    mxhorovod's figures)."""
    results = []
    for impl, config, python in runs(args):
        wargs = ["--worker", "--impl", impl, "--config", config] + list(worker_args)
        try:
            res = launch(args.np, script, wargs, python=python, env=CONFIGS[config],
                         timeout=args.timeout)
        except RuntimeError as e:
            print("launch failed (%s, %s): %s" % (impl, config, e), file=sys.stderr)
            res = {"error": error_summary(e)}
        res.update(impl=impl, config=config)
        results.append(res)
    return results


def in_rank(args, worker):
    """Inside a rank (``--worker``, or started under mpirun): runs ``worker(args)``, hands
    its result (if any) to the launching process, and returns True. Else False: the
    caller is the launching process."""
    if not (args.worker or under_mpirun()):
        return False
    res = worker(args)
    if res is not None:
        emit_result(res)
    return True


def run_script(args, worker, report, script, worker_args):
    """A benchmark script's main: inside a rank (``--worker``, or started by hand under
    mpirun, then labelled config "env"), run ``worker(args)`` and hand rank 0's result to
    the launcher (or straight to ``report``); else launch every run of :func:`runs` with
    ``worker_args`` and ``report`` the results."""
    if args.worker or under_mpirun():
        if not args.worker:
            args.config = "env"
        res = worker(args)
        if res is not None:
            res.update(impl=args.impl, config=args.config)
            if args.worker:
                emit_result(res)
            else:
                report([res])
        return 0
    args_out = list(worker_args) + (["--quick"] if getattr(args, "quick", False) else [])
    report(launch_all(args, script, args_out))
    return 0


def error_summary(exc):
    """The last non-empty line of a launch error (the rank's exception, usually)."""
    lines = [line for line in str(exc).splitlines() if line.strip()] or ["?"]
    return lines[-1][:300]


def print_failures(results):
    """One line per failed launch, under a table."""
    for res in results:
        if "error" in res:
            print("%s: failed: %s" % (label(res), res["error"]))
    sys.stdout.flush()


def errors_of(results):
    """The failed launches: [{"impl", "config", "error"}]."""
    return [{k: res[k] for k in ("impl", "config", "error")} for res in results
            if "error" in res]


def label(res):
    return res["impl"] + ("" if res["config"] == "default" else " " + res["config"])


# ---------------------------------------------------------------- workloads


def resnet50_gradient_shapes(conv_biases=False):
    """[(name, shape)] of the gradients of ``mxnet.gluon.model_zoo.vision.resnet50_v1()``
    (every parameter with grad_req != 'null', in creation order, i.e. forward order):
    193 tensors, 25,575,912 float32; with ``conv_biases=False`` the 32 small convolution
    biases that Gluon's version adds (the reference ResNet-50 has none) are left out: 161
    tensors, 25,557,032 float32 (102.2 MB). Shapes by symbolic shape inference; no
    download, no weights."""
    import mxnet as mx
    net = mx.gluon.model_zoo.vision.resnet50_v1()
    sym = net(mx.sym.var("data"))
    arg_shapes, _, _ = sym.infer_shape(data=(1, 3, 224, 224))
    shapes = dict(zip(sym.list_arguments(), arg_shapes))
    out = []
    for name, p in net.collect_params().items():
        if p.grad_req == "null":
            continue
        if not conv_biases and "_conv" in name and name.endswith("_bias"):
            continue
        out.append((name, tuple(shapes[name])))
    return out


def gradient_set(which):
    """``which`` is "161" (no conv biases) or "193" (every gradient); see
    :func:`resnet50_gradient_shapes`."""
    if which not in ("161", "193"):
        raise ValueError("gradient set must be 161 or 193, got %r" % (which,))
    return resnet50_gradient_shapes(conv_biases=(which == "193"))


def per_tensor_step(hvd, mx, arrays, prefix):
    """One step of a training loop's reduction: one named in-place Sum ``allreduce_`` per
    array, then wait for all of them."""
    def step():
        for i, a in enumerate(arrays):
            hvd.allreduce_(a, op=hvd.Sum, name="%s.%d" % (prefix, i))
        mx.nd.waitall()
    return step


def check_sum(mx, arrays, step, size, what):
    """Runs ``step`` once on arrays of ones and checks that it left ``size`` everywhere
    (raises SystemExit naming ``what`` otherwise), then zeroes the arrays: sums of zeros
    never overflow in the timed steps, and a broken setup never times nonsense."""
    for a in arrays:
        a[:] = 1
    step()
    for a in arrays[:3] + arrays[-3:]:
        lo, hi = float(a.min().asscalar()), float(a.max().asscalar())
        if lo != size or hi != size:
            raise SystemExit("%s: a sum of ones over %d processes gave %s..%s"
                             % (what, size, lo, hi))
    for a in arrays:
        a[:] = 0
    mx.nd.waitall()
