"""Smoke test of benchmarks/: every script runs with --quick and prints a JSON line with the
expected keys; the launcher leaves no process behind. Speed is never asserted here (see
docs/benchmarks.md for the figures)."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

import common  # benchmarks/, on sys.path through pytest's pythonpath setting
from support.paths import BENCHMARKS as BENCH, ROOT


def run_script(name, *args, timeout=180):
    """Runs benchmarks/<name> --quick --no-horovod; returns its final JSON object."""
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, os.path.join(BENCH, name), "--quick", "--no-horovod"] + list(args)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        raise AssertionError("timed out after %ss: %s\n%s" % (timeout, cmd, out[-6000:]))
    assert proc.returncode == 0, "exit %d\n%s" % (proc.returncode, out[-6000:])
    last = out.strip().splitlines()[-1]
    obj = json.loads(last)
    assert obj.get("errors", []) == [], out[-6000:]
    assert set(obj["machine"]) >= {"host", "cpus", "loadavg", "date"}
    return obj


def check_stats(s):
    assert set(s) >= {"median", "min", "max", "reps"}, s
    assert 0 < s["min"] <= s["median"] <= s["max"], s


def test_allreduce():
    obj = run_script("allreduce.py")
    assert obj["benchmark"] == "allreduce" and obj["ranks"] == 2
    assert [r["bytes"] for r in obj["rows"]] == [4096, 16384, 65536]
    for r in obj["rows"]:
        assert (r["impl"], r["config"]) == ("mxhorovod", "default")
        for k in ("time_s", "mpi4py_s", "mpi4py_during_s"):
            check_stats(r[k])
        assert r["ratio"] == pytest.approx(r["time_s"]["median"] / r["mpi4py_s"]["median"])
        # busbw = 2(p-1)/p x bytes / time; p = 2: bytes / time.
        assert r["busbw_GBps"] == pytest.approx(r["bytes"] / r["time_s"]["median"] / 1e9)


def test_resnet50_gradients():
    obj = run_script("resnet50_gradients.py")
    rows = {(r["set"], r["what"]): r for r in obj["rows"]}
    for s in ("161", "193"):
        r = rows[(s, "allreduce_ per tensor")]
        assert r["tensors"] == 8
        check_stats(r["time_s"])
        strategy, _, interleaved = r["floor"].partition(", ")
        assert interleaved == "interleaved", r["floor"]
        assert strategy in ("per_call", "per_call_userop") or strategy.startswith("pack_")
        assert set(obj["floors"][s]) >= {"per_call", "pack_one_call", "contiguous_one_call",
                                         "per_call_userop", "pack_one_call_userop",
                                         "contiguous_one_call_userop", "copy", "floor",
                                         "pack_best", "contiguous_best"}
    t = rows[("mobilenet0.25", "DistributedTrainer.allreduce_grads")]
    check_stats(t["time_s"])
    assert t["tensors"] > 50 and t["ratio"] > 0
    # The floor strategy that won, timed again in alternation with the trainer's steps.
    strategy, _, interleaved = t["floor"].partition(", ")
    assert interleaved == "interleaved", t["floor"]
    assert re.fullmatch(r"(per_call|pack_one_call|pack_sliced_\d+MiB)(_userop)?", strategy), strategy
    check_stats(t["floor_s"])


def test_small_tensors():
    obj = run_script("small_tensors.py")
    rows = {r["what"]: r for r in obj["rows"]}
    assert set(rows) == {"each", "grouped", "engine_noop"}
    assert rows["each"]["floor"] in ("per_call, interleaved", "per_call_userop, interleaved")
    assert rows["grouped"]["floor"] in ("pack_one_call, interleaved",
                                        "pack_one_call_userop, interleaved")
    # MXNet's own cost of one engine operation per tensor, beside "each".
    assert rows["engine_noop"]["impl"] == "mxnet"
    assert rows["engine_noop"]["floor"] in ("per_call", "per_call_userop")
    for r in rows.values():
        assert r["count"] == 50 and r["bytes"] == 1024
        check_stats(r["time_s"])
        check_stats(r["floor_s"])


def test_call_cost():
    obj = run_script("call_cost.py")
    (r,) = obj["rows"]
    assert (r["impl"], r["count"], r["ranks"]) == ("mxhorovod", 50, 2)
    for k in ("floor", "step", "calls", "python_loop", "python_wrapper", "engine_push",
              "cpu_main", "cpu_library"):
        assert r[k] > 0, k
    # The background thread's stages, per tensor, from _core.loop_stats().
    assert set(r["stages"]) == {"negotiate", "plan", "execute", "complete", "sleep"}
    assert r["stages"]["execute"] > 0 and r["stages"]["complete"] > 0
    assert 1 <= r["groups_per_step"] <= 50
    q = r["step_quantiles"]
    assert list(q) == ["25%", "50%", "90%"]
    assert 0 < q["25%"]["us_per_tensor"] <= q["50%"]["us_per_tensor"] <= q["90%"]["us_per_tensor"]
    assert all(v["cycles"] >= 1 for v in q.values())


def test_idle_cpu():
    obj = run_script("idle_cpu.py")
    assert sorted(r["rank"] for r in obj["rows"]) == [0, 1]
    for r in obj["rows"]:
        assert r["library_threads"] >= 1  # the background thread
        assert r["before_init_cpu_per_s"] >= 0 and r["library_threads_cpu_per_s"] >= 0
        assert r["busiest_thread"]["name"]


def test_ps_vs_allreduce():
    obj = run_script("ps_vs_allreduce.py", timeout=240)
    runs = {r["run"]: r for r in obj["rows"]}
    assert set(runs) == {"dist_sync", "mxhorovod"}
    for r in runs.values():
        assert r["tensors"] == 8
        check_stats(r["step_s"])
    assert obj["dist_sync_over_mxhorovod"] == pytest.approx(
        runs["dist_sync"]["step_s"]["median"] / runs["mxhorovod"]["step_s"]["median"])


RUNS = {"1 process", "2 independent ranks", "2 ranks in lockstep, no exchange", "mxhorovod",
        "mxhorovod bucket views"}


def test_fp16():
    obj = run_script("fp16.py")
    assert obj["benchmark"] == "fp16"
    kernel = [r for r in obj["rows"] if r["what"] == "kernel"]
    assert {r["path"] for r in kernel} >= {"portable"} and all(r["elements"] == 4097 for r in kernel)
    for r in kernel:
        for k in ("time_s", "stream_s", "memcpy_s"):
            check_stats(r[k])
        assert r["ratio"] == pytest.approx(r["time_s"]["median"] / r["stream_s"]["median"])
    casts = [r for r in obj["rows"] if r["what"] == "cast"]
    assert sorted(r["direction"] for r in casts) == ["float16->float32", "float32->float16"]
    for r in casts:
        for k in ("time_s", "mxnet_s", "memcpy_s"):
            check_stats(r[k])
        assert r["ratio"] == pytest.approx(r["time_s"]["median"] / r["mxnet_s"]["median"])
    rows = [r for r in obj["rows"] if r["what"] == "allreduce_"]
    assert sorted((r["simd"], r["op"]) for r in rows) == [("auto", "Average"), ("auto", "Sum")]
    for r in rows:
        check_stats(r["float16_s"])
        check_stats(r["float32_s"])
        assert r["ratio"] == pytest.approx(r["float16_s"]["median"] / r["float32_s"]["median"])


def test_scaling_mnist():
    obj = run_script("scaling.py", "--model", "mnist", timeout=240)
    runs = {r["run"]: r for r in obj["rows"]}
    assert set(runs) == RUNS
    rounds = obj["rounds"]["mnist"]["mxhorovod"]
    assert len(rounds) == 2  # --quick: 2 rounds, every mode in each
    assert all(set(r) == {"one", "independent", "lockstep", "dist", "views"} for r in rounds)

    def median_of(fn):
        return common.stats([fn(r) for r in rounds])["median"]
    ceiling = median_of(lambda r: r["independent"] / (2 * r["one"]))
    assert runs["2 independent ranks"]["ceiling"] == pytest.approx(ceiling)
    for name, mode in (("mxhorovod", "dist"), ("mxhorovod bucket views", "views"),
                       ("2 ranks in lockstep, no exchange", "lockstep")):
        r = runs[name]
        assert r["efficiency"] == pytest.approx(median_of(lambda x: x[mode] / (2 * x["one"])))
        assert r["gap"] == pytest.approx(median_of(
            lambda x: (x["independent"] - x[mode]) / (2 * x["one"])))
        assert r["images_per_s"]["median"] == pytest.approx(median_of(lambda x: x[mode]))
    cpu_rounds = obj["cpu_rounds"]["mnist"]["mxhorovod"]
    mode_of = {"1 process": "one", "2 independent ranks": "independent", "mxhorovod": "dist",
               "2 ranks in lockstep, no exchange": "lockstep", "mxhorovod bucket views": "views"}
    for name, r in runs.items():  # where the CPU went: every mode, every kind of thread
        cpu, mode = r["cpu_ms_per_step"], mode_of[name]
        assert set(cpu) == {"main", "mxnet", "library", "total"}
        assert all(v >= 0 for v in cpu.values()) and cpu["mxnet"] > 0, cpu
        for kind in ("main", "mxnet", "library"):
            assert cpu[kind] == pytest.approx(common.stats(
                [x[mode][kind] for x in cpu_rounds])["median"])
        assert cpu["total"] == pytest.approx(common.stats(
            [sum(x[mode].values()) for x in cpu_rounds])["median"])
    ours = runs["mxhorovod"]
    assert ours["lockstep_gap"] == pytest.approx(median_of(
        lambda x: (x["lockstep"] - x["dist"]) / (2 * x["one"])))


def test_scaling_keeps_each_configuration_apart():
    # Two launches of one library (default, nocma) each get their own rows, computed from
    # their own rounds (the second once replaced the first under the library's name).
    import scaling
    fast = {"one": 100.0, "independent": 190.0, "lockstep": 180.0, "dist": 170.0, "views": 175.0}
    slow = dict(fast, dist=150.0, views=155.0)
    rows = scaling.summarize({"model": "m", "p": 2, "runs": {
        "mxhorovod": {"rounds": [fast, fast]}, "mxhorovod nocma": {"rounds": [slow, slow]}}})
    dist = {r["library"]: r for r in rows if r["run"] == "mxhorovod"}
    assert set(dist) == {"mxhorovod", "mxhorovod nocma"}
    assert dist["mxhorovod"]["efficiency"] == pytest.approx(0.85)
    assert dist["mxhorovod nocma"]["efficiency"] == pytest.approx(0.75)
    assert {r["run"] for r in rows if r["library"] == "mxhorovod nocma"} == RUNS


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MXHOROVOD_TEST_SLOW") != "1",
                    reason="set MXHOROVOD_TEST_SLOW=1 to run (about a minute; the MNIST run "
                           "covers the same script)")
def test_scaling_resnet50():
    obj = run_script("scaling.py", "--model", "resnet50", timeout=400)
    assert {r["run"] for r in obj["rows"]} == RUNS


def test_unknown_configuration_is_refused():
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "small_tensors.py"),
                           "--configs", "default,bogus"], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    assert proc.returncode != 0
    assert "unknown configuration 'bogus'" in proc.stdout


def test_stats_and_busbw():
    assert common.stats([3.0, 1.0, 2.0, 10.0]) == {"median": 2.5, "min": 1.0, "max": 10.0,
                                                   "reps": 4}
    assert common.stats([5.0])["median"] == 5.0
    assert common.busbw(1e9, 1.0, 4) == pytest.approx(1.5)  # 2 x 3/4 x 1 GB / 1 s
    assert common.busbw(1e9, 2.0, 1) == pytest.approx(0.5)


def test_launch_timeout_kills_every_rank(tmp_path):
    """A hung launch raises within its timeout and leaves no rank running."""
    script = tmp_path / ("hang_%d.py" % os.getpid())
    script.write_text("import time\ntime.sleep(600)\n")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out after 5s"):
        common.launch(2, str(script), [], timeout=5)
    assert time.monotonic() - t0 < 60
    time.sleep(0.5)
    alive = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if str(script).encode() in f.read():
                        alive.append(pid)
            except OSError:
                pass
    assert alive == [], "left running: %s" % alive


def test_each_horovod_launch_follows_its_mxhorovod_launch():
    # Raw Horovod/mxhorovod ratios pair launches of one configuration: adjacent, not all of
    # one library first (minutes apart on a machine that drifts). nocma has no Horovod run.
    import argparse
    args = argparse.Namespace(configs=["default", "nofusion", "nocma"], no_horovod=False,
                              horovod_python=sys.executable)
    assert [(impl, c) for impl, c, _ in common.runs(args)] == [
        ("mxhorovod", "default"), ("horovod", "default"), ("mxhorovod", "nofusion"),
        ("horovod", "nofusion"), ("mxhorovod", "nocma")]
    args.no_horovod = True
    assert [impl for impl, _, _ in common.runs(args)] == ["mxhorovod"] * 3


def skip_without_netns():
    """Skips the test where namespace hosts cannot be made (not root, no `ip netns`)."""
    from mxhorovod_devtools.netns_hosts import NetnsHosts, NetnsUnavailable
    try:
        with NetnsHosts(1):
            pass
    except NetnsUnavailable as e:
        pytest.skip("no network namespaces: %s" % e)


def test_cluster_quick():
    # Two namespace hosts capped at 1 Gbit/s, a 1 MiB allreduce: the TCP floor, mpi4py and
    # the default and flat rows, each with the bytes each host sent (at least the payload:
    # 2(h-1)/h with h = 2), and its ratio to the floor.
    skip_without_netns()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "cluster.py"), "--quick"], cwd=ROOT,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout[-6000:]
    obj = json.loads(proc.stdout.strip().splitlines()[-1])
    assert obj["benchmark"] == "cluster" and obj["errors"] == [], proc.stdout[-3000:]
    (setting,) = obj["settings"]
    assert (setting["hosts"], setting["ranks_per_host"], setting["rate"]) == (2, 1, "1gbit")
    floor = setting["floors"]["1MiB"]
    check_stats(floor)
    assert [r["row"] for r in obj["rows"]] == ["mpi4py Allreduce", "default", "flat"]
    for r in obj["rows"]:
        check_stats(r["time_s"])
        assert r["ratio"] == pytest.approx(r["time_s"]["median"] / floor["median"])
        assert sorted(r["sent"]) == ["h1", "h2"]
        assert r["counts"] == all(v >= r["bytes"] for v in r["sent"].values()), r
        assert r["counts"], r  # every byte of the other host's share crossed the veths
        assert r["machine_cpu_s"] >= 0, r


def test_overlap_bound_of_the_gradient_order():
    # benchmarks/overlap_bound.py: the link sends the gradients one after another, each from
    # when every rank has it; what is left after the last one is ready cannot be hidden.
    from overlap_bound import exposed_us, overlap_bound, steps_exposed_us
    from mxhorovod.timeline.events import Span, Timeline
    # 100 B each at 10 B/us, ready every 10 us: the link keeps up, only the last is exposed.
    assert exposed_us([0, 10, 20], [100, 100, 100], 10) == 10
    assert exposed_us([20, 0, 10], [100, 100, 100], 10) == 10  # any order given
    assert exposed_us([0, 0, 0], [100, 100, 100], 10) == 30   # all at once: all exposed
    assert exposed_us([0, 100], [50, 50], 1) == 50            # the link idles in between
    assert exposed_us([0, 1], [50, 50], 1) == 99              # the second queues
    for bad in (([], [], 1), ([0], [1, 2], 1), ([0], [1], 0)):
        with pytest.raises(ValueError):
            exposed_us(*bad)

    def timeline(uses):  # {tensor: [ALLREDUCE start per use]}
        spans = []
        for name, starts in uses.items():
            for u, t in enumerate(starts):
                spans.append(Span(name, "NEGOTIATE_ALLREDUCE", t - 5, t, u, 0))
                spans.append(Span(name, "ALLREDUCE", t, t + 50, u, 0))
                spans.append(Span(name, "MPI_ALLREDUCE", t + 1, t + 40, u, 1))
        return Timeline(spans, [], [], 0, list(uses))
    tl = timeline({"g.0": [1000, 0], "g.1": [1010, 10], "g.batch_size": [0, 0]})
    sizes = {"g.0": 100, "g.1": 100}
    # Step 1 (uses 0): ready at 1000, 1010; step 2: 0, 10 (the uses sorted by time).
    assert steps_exposed_us(tl, sizes, 10) == [10, 10]
    # E = 20 us for the 200 B: 10 B/us, so 10 of 20 us exposed at best.
    assert overlap_bound(tl, sizes, 20e-6) == pytest.approx(0.5)
    assert overlap_bound(timeline({"g.0": [0]}), sizes, 20e-6) is None  # g.1 never reduced


def check_sync_batch_norm(obj, setting, hosts):
    assert obj["benchmark"] == "sync_batch_norm"
    (r,) = obj["rows"]
    assert (r["setting"], r["ranks"], r["hosts"]) == (setting, 2, hosts)
    # ResNet-50 v1b: the stem's, 3 per bottleneck (16) and 4 downsamples' normalizations.
    assert (r["layers"], r["collectives_per_step"]) == (53, 106)
    check_stats(r["bn_s"])
    check_stats(r["syncbn_s"])
    assert r["ratio"] == pytest.approx(r["syncbn_s"]["median"] / r["bn_s"]["median"])
    check_stats(r["round_ratio"])


def test_sync_batch_norm_quick():
    # benchmarks/sync_batch_norm.py: both ResNet-50 variants, one round of one step each.
    check_sync_batch_norm(run_script("sync_batch_norm.py", timeout=120), "1 host, 2 ranks", 1)


def test_sync_batch_norm_hosts_quick():
    skip_without_netns()
    obj = run_script("sync_batch_norm.py", "--hosts", "--rates", "1gbit", timeout=120)
    check_sync_batch_norm(obj, "2 hosts x 1 rank, eth0 capped at 1gbit", 2)


def test_adasum_quick():
    obj = run_script("adasum.py")
    row = obj["rows"][0]
    check_stats(row["sum_s"])
    check_stats(row["adasum_s"])
    assert row["ranks"] == 2 and row["tensors"] == 8 and row["levels"] == 1, row


def test_adasum_mnist_quick():
    obj = run_script("adasum_mnist.py", timeout=240)
    assert [r["op"] for r in obj["rows"]] == ["average", "adasum"], obj["rows"]
    for r in obj["rows"]:
        assert len(r["runs"]) == 1 and 0 < r["runs"][0]["accuracy"] <= 1, r
    assert obj["rows"][0]["lr"] == 2 * obj["rows"][1]["lr"]  # average: scaled by 2 ranks
