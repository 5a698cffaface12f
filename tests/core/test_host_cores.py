"""How many cores the ranks of a host may use (mxhorovodrun/cores.py, src/common/host_cores.cc):
the union of their CPU affinity masks, capped by their cgroups' CPU quotas. The background
thread gives a shared core away at once when the host has more ranks than that (its
"this host: ..." debug line says which), and mxhorovodrun sizes OMP_NUM_THREADS by it."""
import contextlib
import os
import re
import uuid

import pytest

from mxhorovod_devtools.mpirun import run_ranks
from mxhorovodrun import cores


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def limit(tmp_path, proc_cgroup):
    write(tmp_path / "proc_cgroup", proc_cgroup)
    return cores.cgroup_cpu_limit(str(tmp_path / "proc_cgroup"), str(tmp_path / "fs"))


def v2_root(tmp_path):
    write(tmp_path / "fs" / "cgroup.controllers", "cpu memory\n")  # cgroup v2 mounted here
    return tmp_path / "fs"


def test_cgroup_v2_quota_is_the_tightest_on_the_path(tmp_path):
    fs = v2_root(tmp_path)
    write(fs / "cpu.max", "max 100000\n")
    write(fs / "pod" / "cpu.max", "250000 100000\n")
    write(fs / "pod" / "job" / "cpu.max", "max 100000\n")
    assert limit(tmp_path, "0::/pod/job\n") == (2.5, "v2:/pod")
    write(fs / "pod" / "job" / "cpu.max", "150000 100000\n")
    assert limit(tmp_path, "0::/pod/job\n") == (1.5, "v2:/pod/job")


def test_cgroup_v2_without_quota_or_without_files(tmp_path):
    v2_root(tmp_path)
    write(tmp_path / "fs" / "cpu.max", "max 100000\n")
    assert limit(tmp_path, "0::/\n") == (None, "")
    assert limit(tmp_path, "0::/not/here\n") == (None, "")  # the mount's own: no quota
    for bad in ("garbage\n", "0 100000\n", "-100 100000\n", "100000 0\n", "1%s 1\n" % ("0" * 400),
                "\xff\xfe 1\n", ""):
        write(tmp_path / "fs" / "cpu.max", bad)
        assert limit(tmp_path, "0::/\n") == (None, ""), bad
    assert cores.cgroup_cpu_limit(str(tmp_path / "none"), str(tmp_path / "fs")) == (None, "")


def test_cgroup_v2_path_of_the_host_inside_a_container(tmp_path):
    # /proc/self/cgroup names the host's path; the container's mount is its own cgroup.
    v2_root(tmp_path)
    write(tmp_path / "fs" / "cpu.max", "100000 50000\n")
    assert limit(tmp_path, "0::/kubepods/burstable/pod1/abc\n") == (2.0, "v2:/")


def test_cgroup_v1_quota_and_hybrid_mounts(tmp_path):
    fs = tmp_path / "fs"
    write(fs / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    write(fs / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    write(fs / "cpu,cpuacct" / "docker" / "x" / "cpu.cfs_quota_us", "50000\n")
    write(fs / "cpu,cpuacct" / "docker" / "x" / "cpu.cfs_period_us", "100000\n")
    write(fs / "unified" / "cpu.max", "max 100000\n")  # hybrid: no cpu controller in v2
    text = "12:memory:/docker/x\n4:cpu,cpuacct:/docker/x\n0::/docker/x\n"
    assert limit(tmp_path, text) == (0.5, "v1:/docker/x")
    assert limit(tmp_path, "4:cpu,cpuacct:/\n") == (None, "")
    # A "cpu" hierarchy mounted under its own name (as on this project's machines).
    write(fs / "cpu" / "j" / "cpu.cfs_quota_us", "300000\n")
    write(fs / "cpu" / "j" / "cpu.cfs_period_us", "100000\n")
    assert limit(tmp_path, "1:cpu:/j\n2:cpuacct:/j\n") == (3.0, "v1:/j")


def test_cgroup_v2_on_a_hybrid_mount_and_paths_outside_the_namespace(tmp_path):
    fs = tmp_path / "fs"  # no cgroup.controllers at the root: v2 is at fs/unified
    write(fs / "unified" / "a" / "cpu.max", "50000 100000\n")
    write(fs / "cpu.max", "10000 100000\n")  # not a v2 file here: never read
    assert limit(tmp_path, "0::/a\n") == (0.5, "v2:/a")
    # ".." in the path: a process outside its cgroup namespace's root; not under the mount.
    assert limit(tmp_path, "0::/../..\n") == (None, "")


def test_cgroup_files_that_are_not_text(tmp_path):
    v2_root(tmp_path)
    write(tmp_path / "fs" / "cpu.max", "150000 100000\n")
    (tmp_path / "proc_cgroup").write_bytes(b"0::/caf\xff\n")  # a cgroup name not in UTF-8
    assert cores.cgroup_cpu_limit(str(tmp_path / "proc_cgroup"), str(tmp_path / "fs")) == (1.5, "v2:/")
    (tmp_path / "proc_cgroup").write_bytes(b"\x00\xff\xfe")
    assert cores.cgroup_cpu_limit(str(tmp_path / "proc_cgroup"), str(tmp_path / "fs")) == (None, "")


def test_cgroup_chain_innermost_first_keyed_by_the_directory(tmp_path):
    fs = v2_root(tmp_path)
    write(fs / "pod" / "cpu.max", "200000 100000\n")
    write(fs / "pod" / "c1" / "cpu.max", "100000 100000\n")
    write(tmp_path / "proc_cgroup", "0::/pod/c1\n")
    chain = cores.cgroup_cpu_limits(str(tmp_path / "proc_cgroup"), str(fs))
    st_c1, st_pod = os.stat(fs / "pod" / "c1"), os.stat(fs / "pod")
    assert chain == [(1.0, "%d:%d" % (st_c1.st_dev, st_c1.st_ino), "v2:/pod/c1"),
                     (2.0, "%d:%d" % (st_pod.st_dev, st_pod.st_ino), "v2:/pod")]


def test_host_quota_adds_up_the_ranks_cgroups():
    from mxhorovod import _core
    assert _core.host_quota([]) == 0
    assert _core.host_quota(["a=1.5", "a=1.5"]) == 1.5                # one cgroup, counted once
    assert _core.host_quota(["a=1.5", "b=1.5"]) == 3.0                # two containers
    assert _core.host_quota(["a=1;p=1", "b=1;p=1"]) == 1.0            # the parent is tighter
    assert _core.host_quota(["a=0.8;p=4", "b=0.8;p=4"]) == 1.6        # the children are
    assert _core.host_quota(["p=1", "b=0.5;p=1"]) == 1.0              # a rank in the parent
    assert _core.host_quota(["a=1", ""]) == 0                         # a rank with no quota
    for bad in (["a="], ["=1"], ["a=x"], ["a=-1"], ["a=1;;b=2"], ["a=1;p=2", "a=1;q=2"]):
        assert _core.host_quota(bad) == 0, bad


def test_usable_cores_is_the_affinity_capped_by_the_quota(monkeypatch):
    monkeypatch.setattr(cores, "affinity_cores", lambda: 8)
    monkeypatch.setattr(cores, "cgroup_cpu_limit", lambda: (None, ""))
    assert cores.usable_cores() == 8
    monkeypatch.setattr(cores, "cgroup_cpu_limit", lambda: (2.5, "v2:/pod"))
    assert cores.usable_cores() == 2
    monkeypatch.setattr(cores, "cgroup_cpu_limit", lambda: (0.5, "v2:/pod"))
    assert cores.usable_cores() == 1


def host_line(np_, **kwargs):
    proc = run_ranks(np_, "host_cores.py", timeout=180, env={"HOROVOD_LOG_LEVEL": "debug"}, **kwargs)
    lines = set(re.findall(r"this host: .*", proc.stdout))
    assert len(lines) == 1, (lines, proc.stdout[-4000:])  # every rank of the host alike
    return lines.pop()


def test_ranks_pinned_to_one_core_give_it_away():
    line = host_line(2, outer=("taskset", "-c", str(min(os.sched_getaffinity(0)))))
    assert line.startswith("this host: 2 ranks, 1 CPU in the ranks' affinity masks, cgroup CPU "
                           "quota none: more ranks than cores"), line


def test_ranks_bound_to_a_core_each_count_the_union():
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2 or cores.cgroup_cpu_limit()[0] is not None:
        pytest.skip("needs 2 usable cores and no CPU quota")
    # mpirun -bind-to core (options of mpirun, before the command): each rank's own mask
    # holds one core, which alone would say "more ranks than cores"; together they have two.
    line = host_line(2, prefix=("-bind-to", "core", "-map-by", "core"))
    assert line == ("this host: 2 ranks, 2 CPUs in the ranks' affinity masks, cgroup CPU quota "
                    "none: a core per rank, data waits test back to back first"), line


def cpu_cgroup_v1():
    """A writable cgroup v1 "cpu" hierarchy (root only), or None."""
    for d in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
        if os.path.isfile(os.path.join(d, "cpu.cfs_quota_us")) and os.access(d, os.W_OK):
            return d
    return None


def test_ranks_in_a_cgroup_with_a_one_cpu_quota_give_the_core_away():
    hierarchy = cpu_cgroup_v1()
    if hierarchy is None or os.geteuid() != 0:
        pytest.skip("needs root and a writable cgroup v1 cpu hierarchy")
    group = os.path.join(hierarchy, "mxhorovod-test-" + uuid.uuid4().hex[:8])
    try:
        os.mkdir(group)
    except OSError as e:
        pytest.skip("cannot make a cgroup: %s" % e)
    try:
        with open(os.path.join(group, "cpu.cfs_period_us"), "w") as f:
            f.write("100000")
        with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as f:
            f.write("100000")  # one CPU's time, whatever the affinity allows
        enter = ("sh", "-c", 'echo $$ > "%s/cgroup.procs" && exec "$@"' % group, "sh")
        line = host_line(2, outer=enter)
        assert re.match(r"this host: 2 ranks, \d+ CPUs in the ranks' affinity masks, cgroup CPU "
                        r"quota 1 CPU: more ranks than cores", line), line
    finally:
        with contextlib.suppress(OSError):  # busy only if the job outlived its timeout
            os.rmdir(group)


def bg_cores(proc, np_):
    # Not anchored: two ranks' lines may reach mpirun's output run together.
    found = dict(re.findall(r"BG (\d+) (\d[\d,-]*)", proc.stdout))
    assert sorted(found) == [str(r) for r in range(np_)], proc.stdout[-3000:]
    return [found[str(r)] for r in range(np_)]


def test_thread_affinity_pins_each_local_ranks_background_thread():
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        pytest.skip("needs 2 usable cores")
    want = [usable[1], usable[0]]  # local rank 0 on the second core, rank 1 on the first
    proc = run_ranks(2, "host_cores_thread_affinity.py", timeout=180, env={
        "HOROVOD_THREAD_AFFINITY": " %d, %d" % tuple(want), "HOROVOD_LOG_LEVEL": "debug"})
    assert bg_cores(proc, 2) == [str(c) for c in want]
    assert proc.stdout.count("background thread pinned to core") == 2, proc.stdout[-3000:]


def test_thread_affinity_with_too_few_cores_or_a_core_out_of_reach_warns():
    with open("/proc/self/status") as f:  # the ranks inherit this process's affinity
        everything = [line.split()[1] for line in f if line.startswith("Cpus_allowed_list:")][0]
    proc = run_ranks(2, "host_cores_thread_affinity.py", timeout=180, env={"HOROVOD_THREAD_AFFINITY": "0"})
    assert "HOROVOD_THREAD_AFFINITY names 1 core(s) for the 2 ranks of this host" in proc.stdout
    assert bg_cores(proc, 2) == [everything] * 2  # not pinned
    far = max(os.sched_getaffinity(0)) + 1000  # no such core here
    proc = run_ranks(2, "host_cores_thread_affinity.py", timeout=180,
                     env={"HOROVOD_THREAD_AFFINITY": "%d,%d" % (far, far)})
    assert proc.stdout.count("cannot run its background thread on core %d" % far) == 2, \
        proc.stdout[-3000:]


@pytest.mark.parametrize("value", ["a", "1,,2", "1;2", "-1", "1,"])
def test_thread_affinity_that_is_not_a_core_list_fails_init_on_every_rank(value):
    proc = run_ranks(2, "host_cores_thread_affinity.py", timeout=180, expect_ok=False,
                     env={"HOROVOD_THREAD_AFFINITY": value})
    assert proc.returncode != 0
    message = "HOROVOD_THREAD_AFFINITY='%s' is not a comma-separated list of core ids" % value
    assert proc.stdout.count(message) >= 2, proc.stdout[-3000:]
