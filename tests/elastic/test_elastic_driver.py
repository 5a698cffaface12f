"""mxhorovodrun's elastic driver on hosts of this machine (mxhorovod_devtools.elastic_hosts:
each host in mount and UTS namespaces of its own, with a private commit directory), every
rank started by the launcher, running tests/elastic/workers/elastic_train.py.

Each training test checks the run's log against an independent replay: the job after a
reset starts from the newest commit of the job before (no committed step lost), the steps
kept (each job's steps up to its last commit) cover every sample of every epoch exactly
once (none applied twice), and one process replaying those global batches in order ends
with the parameters the job ended with. The tests that start hosts need root (the
``hosts`` fixture skips without it); those that fail before any host starts do not."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from mxhorovod_devtools.elastic_hosts import LocalHosts, unavailable
from mxhorovod_devtools.mpirun import REPO, as_from_a_terminal, worker_env, worker_path

N, DIM, CLASSES, EPOCHS = 96, 5, 3, 3


@pytest.fixture
def local_hosts():
    """The hosts' files (discovery script, ssh stand-in); starting a host needs root."""
    h = LocalHosts()
    yield h
    h.close()


@pytest.fixture
def hosts(local_hosts):
    """Hosts that start: mount and UTS namespaces of their own (root)."""
    why = unavailable()
    if why:
        pytest.skip(why)
    return local_hosts


def launcher(hosts, args, **env):
    full = worker_env(dict(hosts.env(), ELASTIC_LOG=os.path.join(hosts.root, "log"), **env))
    cmd = [sys.executable, "-m", "mxhorovodrun", "--host-discovery-script", hosts.discovery,
           "--ssh-command", hosts.standin] + list(args) + [sys.executable,
                                                            worker_path("elastic_train.py")]
    return cmd, full


def run(hosts, args, timeout=200, **env):
    cmd, full = launcher(hosts, args, **env)
    proc = subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, cwd=REPO)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("timed out after %ss\n%s" % (timeout, out[-6000:]))
    return proc.returncode, out


def read_log(hosts):
    with open(os.path.join(hosts.root, "log")) as f:
        return [line.split() for line in f if line.strip()]


def history(lines):
    """[(generation, size, loaded counter, [steps kept], [all commit counters])] and the
    kept steps in order: each job's steps up to its last COMMIT (a job that ended, END,
    keeps all)."""
    jobs = []
    resets = [words[1:] for words in lines if words[0] == "RESET"]
    for words in lines:
        if words[0] == "START":
            jobs.append({"gen": int(words[1]), "size": int(words[2]),
                         "loaded": int(words[3]), "events": [], "end": False})
        elif words[0] == "STEP":
            jobs[-1]["events"].append(("step", int(words[2]),
                                       [int(i) for i in words[3].split(",")]))
        elif words[0] == "COMMIT":
            jobs[-1]["events"].append(("commit", int(words[2])))
        elif words[0] == "END":
            jobs[-1]["end"] = True
    kept = []
    for job in jobs:
        events = job["events"]
        if not job["end"]:
            last = max([k for k, e in enumerate(events) if e[0] == "commit"], default=-1)
            events = events[:last + 1]
        kept += [(e[1], e[2]) for e in events if e[0] == "step"]
        job["commits"] = [e[1] for e in job["events"] if e[0] == "commit"]
    # The reset callbacks ran once in every job after the first, with the new size.
    assert resets == [[str(j["gen"]), str(j["size"])] for j in jobs[1:]], (resets, jobs)
    return jobs, kept


def replay(kept):
    """One process, the same model and optimizer, the kept global batches in order."""
    code = r"""
import sys, json
import numpy as np, mxnet as mx
N, DIM, CLASSES = %d, %d, %d
rng = np.random.RandomState(0)
X = rng.rand(N, DIM).astype(np.float32); Y = rng.randint(0, CLASSES, size=N).astype(np.float32)
mx.random.seed(1)
net = mx.gluon.nn.Dense(CLASSES, in_units=DIM); net.initialize(mx.init.Xavier())
tr = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                      kvstore=None)
loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
for idx in json.load(open(sys.argv[1])):
    x, y = mx.nd.array(X[idx]), mx.nd.array(Y[idx])
    with mx.autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    tr.step(len(idx))
np.savez(sys.argv[2], weight=net.weight.data().asnumpy(), bias=net.bias.data().asnumpy())
""" % (N, DIM, CLASSES)
    import json
    import tempfile
    d = tempfile.mkdtemp(prefix="mxh-replay-")
    with open(os.path.join(d, "b.json"), "w") as f:
        json.dump([idx for _, idx in kept], f)
    out = os.path.join(d, "p.npz")
    proc = subprocess.run([sys.executable, "-c", code, os.path.join(d, "b.json"), out],
                          env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    got = dict(np.load(out))
    return got


def check_training(hosts, out, sizes):
    """The checks of the module docstring; ``sizes``: each job's number of ranks."""
    jobs, kept = history(read_log(hosts))
    assert [j["size"] for j in jobs] == sizes, (jobs, out[-3000:])
    assert jobs[0]["loaded"] == 0
    for before, after in zip(jobs, jobs[1:]):
        # The newest commit of the job before: no committed step lost.
        assert after["loaded"] == before["commits"][-1], (before, after)
    for epoch in range(EPOCHS):
        seen = sorted(i for e, idx in kept if e == epoch for i in idx)
        assert seen == list(range(N)), "epoch %d: samples repeated or skipped: %s" % (epoch, seen)
    final = dict(np.load(os.path.join(hosts.root, "log.params.npz")))
    expect = replay(kept)
    for key, value in final.items():
        short = "weight" if key.endswith("weight") else "bias"
        np.testing.assert_allclose(value, expect[short], rtol=1e-4, atol=1e-5, err_msg=key)
    return jobs


def test_host_killed_mid_epoch_goes_on_with_the_others(hosts):
    # Both ranks of hb SIGKILLed after job 0's 7th step (epoch 1, one step after a commit).
    hosts.set_hosts("ha:2\nhb:2\n")
    code, out = run(hosts, ["-np", "4", "--min-np", "2"], ELASTIC_KILL="0:1:7",
                    ELASTIC_KILL_HOST="1")
    assert code == 0, out[-6000:]
    assert "host hb left out: rank 2 was killed by SIGKILL" in out or \
        "host hb left out: rank 3 was killed by SIGKILL" in out, out[-4000:]
    jobs = check_training(hosts, out, [4, 2])
    assert jobs[0]["commits"][-1] == 4 and jobs[1]["loaded"] == 4
    # hb keeps its own last commit (job 0's), ha's were removed when training ended.
    assert [os.path.basename(p) for p in hosts.host_commits("hb")] == ["commit-0-4"]
    assert hosts.host_commits("ha") == []


def scan_processes(proc, seen):
    """Every 0.1 s until ``proc`` ends, each process of this machine: its command line into
    seen["cmdlines"], and the elastic driver's secret of its environment (if any) into
    seen["secrets"] (secret -> the command lines that hold it)."""
    while proc.poll() is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read()
                with open("/proc/%s/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:  # ended meanwhile
                continue
            seen["cmdlines"].add(cmd)
            for item in env:
                if item.startswith(b"MXHOROVOD_ELASTIC_SECRET="):
                    seen["secrets"].setdefault(item.split(b"=", 1)[1], set()).add(cmd)
        time.sleep(0.1)


def test_host_added_joins_at_a_commit(hosts):
    # Also: the driver's secret reaches the ranks of both jobs through their environment,
    # on no process's command line and not in the output.
    hosts.set_hosts("ha:2\n")
    cmd, env = launcher(hosts, ["-np", "2", "--min-np", "2", "--max-np", "4"],
                        ELASTIC_STEP_SLEEP="0.3")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, cwd=REPO)
    seen = {"cmdlines": set(), "secrets": {}}
    scan = threading.Thread(target=scan_processes, args=(proc, seen), daemon=True)
    scan.start()
    try:
        log = os.path.join(hosts.root, "log")
        end = time.monotonic() + 120
        while time.monotonic() < end and not (os.path.exists(log) and
                                              "STEP" in open(log).read()):
            time.sleep(0.2)
        hosts.set_hosts("ha:2\nhb:2\n")
        out, _ = proc.communicate(timeout=200)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(out[-6000:])
    assert proc.returncode == 0, out[-6000:]
    assert "the hosts changed" in out
    jobs = check_training(hosts, out, [2, 4])
    # hb got the state at its first commit and trained from it.
    assert jobs[1]["loaded"] == jobs[0]["commits"][-1]
    scan.join()
    [(secret, holders)] = seen["secrets"].items()  # one per run
    assert len(secret) == 64 and any(b"elastic_train.py" in c for c in holders), holders
    assert not [c for c in seen["cmdlines"] if secret in c]
    assert secret.decode() not in out


def test_below_min_np_ends_naming_the_lost_host(hosts):
    hosts.set_hosts("ha:2\nhb:2\n")
    started = time.monotonic()
    code, out = run(hosts, ["-np", "4", "--min-np", "3", "--elastic-timeout", "3"],
                    ELASTIC_KILL="0:1:3", ELASTIC_KILL_HOST="1")
    assert code == 1, out[-4000:]
    assert ("error: only 2 slots (ha:2) for --min-np 3 after waiting --elastic-timeout 3 s; the "
            "job ends. Hosts lost: hb: rank ") in out, out[-4000:]
    assert "killed by SIGKILL" in out.split("Hosts lost:")[1]
    assert time.monotonic() - started < 120


def test_script_error_is_not_retried(hosts):
    hosts.set_hosts("ha:1\nhb:1\n")
    code, out = run(hosts, ["-np", "2"], ELASTIC_FAIL="0:3")
    assert code != 0, out[-4000:]
    assert "an error of the script is not retried" in out, out[-4000:]
    assert out.count("elastic: job ") == 1, out[-4000:]


def test_discovery_failing_at_start_is_an_error_at_once(local_hosts):
    hosts = local_hosts
    hosts.fail_discovery()
    started = time.monotonic()
    code, out = run(hosts, ["-np", "2"])
    assert code == 1
    assert "error: host discovery script %s failed (exit 3): discovery broke" % hosts.discovery \
        in out, out
    assert time.monotonic() - started < 20


def test_discovery_printing_garbage_is_an_error(local_hosts):
    hosts = local_hosts
    hosts.set_hosts("ha:2\nnot a host\n")
    code, out = run(hosts, ["-np", "2"])
    assert code == 1
    assert "line 2: 'not a host' is not 'host' or 'host:slots'" in out, out


def test_interrupt_ends_the_run_without_a_reset(hosts):
    # SIGINT to the launcher (a Ctrl-C): the ranks end, and no new job starts. Started as
    # from a terminal: in a run in the background (`bash .ci/run &`) it would inherit an
    # ignored SIGINT, keep it ignored, and train to the end (seen: rc 0).
    hosts.set_hosts("ha:1\nhb:1\n")
    cmd, env = launcher(hosts, ["-np", "2"], ELASTIC_STEP_SLEEP="0.5")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, cwd=REPO,
                            preexec_fn=as_from_a_terminal)
    try:
        log = os.path.join(hosts.root, "log")
        end = time.monotonic() + 120
        while time.monotonic() < end and not (os.path.exists(log) and "STEP" in open(log).read()):
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(out[-6000:])
    assert proc.returncode != 0, out[-3000:]
    assert "the job was interrupted (signal 2); no reset" in out, out[-3000:]
    assert out.count("elastic: job ") == 1, out[-3000:]


def test_reset_limit_ends_the_run(hosts):
    hosts.set_hosts("ha:1\nhb:1\n")
    code, out = run(hosts, ["-np", "2", "--min-np", "1", "--reset-limit", "0"],
                    ELASTIC_KILL="0:1:3", ELASTIC_KILL_HOST="1")
    assert code != 0, out[-4000:]
    assert "host hb left out: rank 1 was killed by SIGKILL" in out, out[-4000:]
    assert "error: --reset-limit 0 reached; the job ends" in out, out[-4000:]
    assert out.count("elastic: job ") == 1, out[-4000:]


def test_process_sets_timeline_and_autotune_after_a_reset(hosts):
    # Job 0 on ha:3 + hb:1, hb SIGKILLed after its 7th step; job 1 on ha's 3 ranks, with
    # HOROVOD_TIMELINE, autotune (a sample every 2 steps) and a process set {0, 2} after
    # training. Each job writes its own timeline and autotune log (job_file's rule).
    import json
    from mxhorovod.timeline import load
    from mxhorovodrun.elastic_protocol import job_file
    assert [job_file("/t/tl.json", g) for g in (0, 1, 12)] == \
        ["/t/tl.json", "/t/tl.1.json", "/t/tl.12.json"]
    assert job_file("/t.d/tl", 2) == "/t.d/tl.2" and job_file("DYNAMIC", 1) == "DYNAMIC"
    timeline = os.path.join(hosts.root, "tl.json")
    tune_log = os.path.join(hosts.root, "autotune.csv")
    hosts.set_hosts("ha:3\nhb:1\n")
    code, out = run(hosts, ["-np", "4", "--min-np", "2"], ELASTIC_KILL="0:1:7",
                    ELASTIC_KILL_HOST="1", ELASTIC_PSET="1", HOROVOD_DYNAMIC_PROCESS_SETS="1",
                    HOROVOD_TIMELINE=timeline, HOROVOD_AUTOTUNE="1",
                    HOROVOD_AUTOTUNE_LOG=tune_log, HOROVOD_AUTOTUNE_WARMUP_SAMPLES="0",
                    HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE="2")
    assert code == 0, out[-6000:]
    assert "host hb left out: rank 3 was killed by SIGKILL" in out, out[-4000:]
    # Autotune changes performance knobs only: the one-process replay still matches.
    check_training(hosts, out, [4, 3])
    # The process set {0, 2} of job 1: each member checked its sum, rank 1 is outside.
    for rank in range(3):
        assert "PSET 1 %d 3 ok" % rank in out, out[-4000:]
    assert "PSET 0 " not in out
    # Job 0's timeline was kept (cut off by the kill: load() reads its complete events);
    # job 1 wrote a complete one of its own, with the process set's allreduce.
    first, second = timeline, os.path.join(hosts.root, "tl.1.json")
    assert "mxhorovodrun elastic: HOROVOD_TIMELINE of job 1: %s" % second in out, out[-4000:]
    with open(second) as f:
        json.load(f)
    rows = [load(first).tensors, load(second).tensors]
    for names in rows:
        assert any("indices" in t for t in names), rows  # allgather_object's, every step
    assert not any("pset_check" in t for t in rows[0]), rows
    assert "pset_check [process set 1]" in rows[1], rows
    assert sorted(f for f in os.listdir(hosts.root) if f.startswith("tl")) == \
        ["tl.1.json", "tl.json"]
    # Autotune ran in job 1: its log has samples (job 0's, killed, may hold only the header).
    assert os.path.exists(tune_log)
    with open(os.path.join(hosts.root, "autotune.1.csv")) as f:
        lines = f.read().splitlines()
    assert lines[0].startswith("fusion_threshold_bytes,") and len(lines) > 2, lines


def test_discovery_failing_mid_run_is_retried_keeping_the_last_hosts(tmp_path, caplog):
    # Mid-run, a failing discovery script is retried (as Horovod does): the driver keeps
    # its last good answer, warns once while it fails, and takes the next good answer.
    import argparse
    import logging
    from mxhorovodrun.elastic_driver import ElasticDriver
    state = tmp_path / "answer"
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\nif [ -f %s ]; then cat %s; else echo down >&2; exit 3; fi\n"
                      % (state, state))
    script.chmod(0o755)
    args = argparse.Namespace(host_discovery_script=str(script), slots_per_host=None,
                              blacklist_cooldown_range=None, elastic_timeout=60, min_np=1,
                              max_np=None)
    driver = ElasticDriver(args, environ={})
    state.write_text("ha:2\nhb:1\n")
    driver._discover()
    assert driver.hosts == [("ha", 2), ("hb", 1)] and driver.discovery_error is None
    state.unlink()
    with caplog.at_level(logging.WARNING):
        driver._discover()
        driver._discover()
    assert driver.hosts == [("ha", 2), ("hb", 1)]  # the last good answer is kept
    assert "exit 3" in driver.discovery_error, driver.discovery_error
    assert sum("retrying every" in r.getMessage() for r in caplog.records) == 1
    state.write_text("ha:2\n")
    driver._discover()
    assert driver.hosts == [("ha", 2)] and driver.discovery_error is None
