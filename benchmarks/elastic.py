"""Cost of elastic training: ``state.commit()`` for ResNet-50's state against a training
step, the time from a host's death to training again, and from a host's SIGTERM notice to
training again without it.

    python benchmarks/elastic.py [--batch 16] [--reps 5] [--recovery] [--sigterm]
                                 [--grace S] [--check]

commit rows (one process, ``MXHOROVOD_ELASTIC=1``, commits written to
MXHOROVOD_ELASTIC_COMMIT_DIR or /dev/shm): ``resnet50_v1()`` (25.6 M float32 parameters)
with a DistributedTrainer (SGD with momentum: one state per parameter), after one step.
Alternated, --reps times each: a training step (forward, backward, step on a random batch
of --batch 224x224 images), ``state.save()`` alone (the snapshot into host memory),
``state.commit()`` (the snapshot, the write of the commit file on this host, the host
check). Figures: median (min..max) seconds; the commit's share of a step when committing
every 1, 5 and 10 steps; the commit file's size.

--recovery: the time from a host's death to training again, on two fake hosts of this
machine (devtools/mxhorovod_devtools/elastic_hosts.py; root) under mxhorovodrun's elastic driver: a 2x1 job of
elastic/workers/elastic_train.py whose host hb is SIGKILLed; from the kill to the first step
of the next job, from the log's timestamps (mpirun's end, the new job's start: MXNet's
import and hvd.init() on the ranks, the commit's load and sync).

--sigterm: a spot notice or a drain, on two network-namespace hosts of one rank each
(devtools/mxhorovod_devtools/netns_hosts.py; root): every process of h2 gets SIGTERM after
job 0's 5th step, then SIGKILL after --grace seconds; the ranks call
``state.check_host_updates()`` after each step and commit only at each epoch's end. From
the SIGTERM to the next job's training function and to its first step, the steps job 0
did after the SIGTERM (its last commit is at the step boundary where the ranks stopped),
and whether anything of h2 was still running when the grace time ended. --grace 0: a
node-level kill instead (SIGKILL only, no notice; the steps since the last commit are lost).

--check: ``state.check_host_updates()`` per call when nothing changed, on 2 ranks of this
host under plain mpirun with the driver's host service running in this process.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def fmt(values):
    return "%.3f (%.3f..%.3f)" % (statistics.median(values), min(values), max(values))


def commit_rows(batch, reps):
    base = tempfile.mkdtemp(prefix="mxh-bench-elastic-",
                            dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    os.environ.update(MXHOROVOD_ELASTIC="1", MXHOROVOD_ELASTIC_COMMIT_DIR=base,
                      MXHOROVOD_ELASTIC_JOB_ID="bench")
    import mxnet as mx
    import mxhorovod as hvd
    from mxhorovod.elastic import runtime
    hvd.init()
    net = mx.gluon.model_zoo.vision.resnet50_v1()
    net.initialize(mx.init.Xavier())
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                     {"learning_rate": 0.01, "momentum": 0.9})
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    x = mx.nd.random.uniform(shape=(batch, 3, 224, 224))
    y = mx.nd.array([i % 1000 for i in range(batch)])

    def step():
        with mx.autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(batch)
        mx.nd.waitall()

    step()
    state = hvd.elastic.GluonState(net, trainer, epoch=0, batch=0)
    times = {"step": [], "save": [], "commit": []}
    for _ in range(reps):
        for name, fn in (("step", step), ("save", state.save), ("commit", state.commit)):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    size = os.path.getsize(runtime.store().latest()[2])
    runtime.store().remove()
    os.rmdir(base)
    step_s, commit_s = statistics.median(times["step"]), statistics.median(times["commit"])
    rows = {"batch": batch, "reps": reps, "file_mb": size / 1e6,
            "step_s": times["step"], "save_s": times["save"], "commit_s": times["commit"],
            "share_every": {k: commit_s / (k * step_s) for k in (1, 5, 10)}}
    print("ResNet-50 v1, SGD momentum, batch %d, %d reps (median (min..max) s)" % (batch, reps))
    print("  training step          %s" % fmt(times["step"]))
    print("  state.save()           %s" % fmt(times["save"]))
    print("  state.commit()         %s   file %.1f MB" % (fmt(times["commit"]), size / 1e6))
    for k, share in rows["share_every"].items():
        print("  commit every %2d steps: %.1f%% of the steps' time" % (k, 100 * share))
    return rows


def recovery_rows():
    from mxhorovod_devtools.elastic_hosts import LocalHosts, unavailable
    why = unavailable()
    if why:
        print("recovery: skipped (%s)" % why)
        return None
    h = LocalHosts()
    try:
        h.set_hosts("ha:1\nhb:1\n")
        log = os.path.join(h.root, "log")
        env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", ELASTIC_LOG=log,
                   ELASTIC_KILL="0:1:5", ELASTIC_KILL_HOST="1", ELASTIC_TIMES="1", **h.env())
        t0 = time.time()
        proc = subprocess.run([sys.executable, "-m", "mxhorovodrun", "-np", "2", "--min-np", "1",
                               "--host-discovery-script", h.discovery, "--ssh-command",
                               h.standin, sys.executable,
                               os.path.join(ROOT, "tests", "elastic", "workers", "elastic_train.py")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=300, cwd=ROOT)
        if proc.returncode != 0:
            print(proc.stdout[-3000:])
            return None
        stamps = [line.split() for line in open(log) if line.startswith("TIME ")]
        killed = [float(w[2]) for w in stamps if w[1] == "kill"][0]
        first = [float(w[3]) for w in stamps if w[1] == "step" and w[2] == "1"][0]
        started = [float(w[3]) for w in stamps if w[1] == "start" and w[2] == "1"][0]
        row = {"kill_to_start_s": started - killed, "kill_to_first_step_s": first - killed,
               "total_s": time.time() - t0}
        print("recovery (2 fake hosts x 1 rank, hb SIGKILLed): kill -> new job's training "
              "function %.1f s, -> its first step %.1f s" % (row["kill_to_start_s"],
                                                              row["kill_to_first_step_s"]))
        return row
    finally:
        h.close()


def sigterm_rows(grace):
    from mxhorovod_devtools.elastic_hosts import LocalHosts, unavailable
    from mxhorovod_devtools.netns_hosts import NetnsHosts, NetnsUnavailable
    why = unavailable()
    if why:
        print("sigterm: skipped (%s)" % why)
        return None
    try:
        netns = NetnsHosts(2).__enter__()
    except NetnsUnavailable as e:
        print("sigterm: skipped (no network namespaces: %s)" % e)
        return None
    h = LocalHosts(inner_standin=netns.standin)
    try:
        h.set_hosts("h1:1\nh2:1\n")
        log = os.path.join(h.root, "log")
        env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", ELASTIC_LOG=log,
                   ELASTIC_TIMES="1", ELASTIC_STEP_SLEEP="0.3", ELASTIC_CHECK="1",
                   ELASTIC_COMMIT_EVERY="100", **h.env())
        proc = subprocess.Popen(
            [sys.executable, "-m", "mxhorovodrun", "-np", "2", "--min-np", "1",
             "--host-discovery-script", h.discovery, "--ssh-command", h.standin,
             "--network-interfaces", netns.bridge, "-x", "UCX_TLS=tcp,self",
             "-x", "UCX_NET_DEVICES=eth0", sys.executable,
             os.path.join(ROOT, "tests", "elastic", "workers", "elastic_train.py")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            start_new_session=True)
        end = time.monotonic() + 120
        while time.monotonic() < end and not (
                os.path.exists(log) and open(log).read().count("STEP 0 ") >= 5):
            time.sleep(0.05)
        notice = time.time()
        for pid in netns.pids()["h2"]:
            os.kill(pid, signal.SIGTERM if grace else signal.SIGKILL)
        while time.time() < notice + grace and "START 1 " not in open(log).read():
            time.sleep(0.05)
        left = netns.pids()["h2"]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
        if proc.returncode != 0:
            print(out[-3000:])
            return None
        lines = [line.split() for line in open(log)]
        stamps = [w for w in lines if w[0] == "TIME"]
        after = [w for w in stamps if w[1:3] == ["step", "0"] and float(w[3]) > notice]
        job0 = [w[0] for w in lines if w[:2] in (["STEP", "0"], ["COMMIT", "0"])]
        lost = len(job0) - 1 - max(k for k, w in enumerate(job0) if w == "COMMIT") \
            if "COMMIT" in job0 else job0.count("STEP")
        started = [float(w[3]) for w in stamps if w[1] == "start" and w[2] == "1"][0]
        first = [float(w[3]) for w in stamps if w[1] == "step" and w[2] == "1"][0]
        row = {"grace_s": grace, "steps_after_signal": len(after), "steps_redone": lost,
               "signal_to_start_s": started - notice,
               "signal_to_first_step_s": first - notice,
               "processes_left_at_grace_end": len(left)}
        print("%s (2 netns hosts x 1 rank): %s -> new job's training function %.1f s, its "
              "first step %.1f s; job 0's steps after it: %d, done again: %d%s" % (
                  "sigterm" if grace else "node kill",
                  "h2 SIGTERMed, SIGKILL after %g s" % grace if grace else "h2 SIGKILLed",
                  row["signal_to_start_s"], row["signal_to_first_step_s"], len(after),
                  lost, "; processes of h2 left at the grace end: %d" % len(left)
                  if grace else ""))
        return row
    finally:
        h.close()
        netns.close()


_CHECK_WORKER = r"""
import os, sys, time, statistics
import mxhorovod as hvd
hvd.init()
state = hvd.elastic.ObjectState(epoch=0)
times = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    state.check_host_updates()
    times.append(time.perf_counter() - t)
if hvd.rank() == 0:
    print("CHECK %.6f %.6f %.6f" % (statistics.median(times), min(times), max(times)))
"""


def check_rows(reps):
    """state.check_host_updates() per call on 2 ranks of this host (rank 0 asks the
    driver's host service, then a broadcast), the service running in this process."""
    from mxhorovodrun.elastic_service import HostService
    from mxhorovodrun.elastic_protocol import (ENV_DRIVER, ENV_ELASTIC, ENV_HOSTS_VERSION,
                                               ENV_SECRET)
    secret = "ab" * 32
    with HostService("127.0.0.1", secret, lambda: 0) as service:
        env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", **{
            ENV_ELASTIC: "1", ENV_DRIVER: "127.0.0.1:%d" % service.port,
            ENV_HOSTS_VERSION: "0", ENV_SECRET: secret})
        mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
        proc = subprocess.run([mpirun, "-np", "2", sys.executable, "-c", _CHECK_WORKER,
                               str(reps)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300, cwd=ROOT)
    line = [w for w in proc.stdout.split("\n") if w.startswith("CHECK ")]
    if proc.returncode != 0 or not line:
        print(proc.stdout[-3000:])
        return None
    median, low, high = (float(v) for v in line[0].split()[1:])
    print("state.check_host_updates(), 2 ranks of one host, %d calls: median %.2f ms "
          "(%.2f..%.2f)" % (reps, median * 1e3, low * 1e3, high * 1e3))
    return {"reps": reps, "median_s": median, "min_s": low, "max_s": high}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--recovery", action="store_true")
    p.add_argument("--no-commit", action="store_true")
    p.add_argument("--sigterm", action="store_true")
    p.add_argument("--check", action="store_true",
                   help="the cost of state.check_host_updates() per call")
    p.add_argument("--grace", type=float, default=30.0,
                   help="--sigterm: seconds from the SIGTERM to the SIGKILL")
    a = p.parse_args()
    out = {"benchmark": "elastic", "machine": os.uname().nodename}
    if not a.no_commit:
        out["commit"] = commit_rows(a.batch, a.reps)
    if a.recovery:
        out["recovery"] = recovery_rows()
    if a.sigterm:
        out["sigterm"] = sigterm_rows(a.grace)
    if a.check:
        out["check"] = check_rows(500)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
