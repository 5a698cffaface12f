"""How many cores this process may use: its CPU affinity, capped by its cgroup's CPU quota.

A container or a Kubernetes pod with a CPU limit (``docker run --cpus 2``, ``resources.limits.
cpu: 2``) sees every core of the machine (``os.cpu_count()``, and often its affinity too) but
is throttled to the quota: ranks that size their threads or their spinning by the visible
cores then fight for a fraction of them. Standard library only (the launcher imports no
MXNet); ``hvd.init()`` hands the quota to the core, which adds up the host's ranks.
"""
import os

__all__ = ["affinity_cores", "cgroup_cpu_limit", "usable_cores"]


def affinity_cores():
    """Cores this process may run on (``os.sched_getaffinity``), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _read(path):
    try:
        with open(path) as f:
            return f.read().split()
    except (OSError, UnicodeDecodeError):
        return None


def _quota_v2(directory):
    """CPUs allowed by ``cpu.max`` ("$MAX $PERIOD", microseconds; "max" = none) or None."""
    words = _read(os.path.join(directory, "cpu.max"))
    try:
        if words and words[0] != "max" and int(words[1]) > 0:
            return int(words[0]) / int(words[1])
    except (IndexError, ValueError):
        pass
    return None


def _quota_v1(directory):
    """CPUs allowed by ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1 = none) or None."""
    quota = _read(os.path.join(directory, "cpu.cfs_quota_us"))
    period = _read(os.path.join(directory, "cpu.cfs_period_us"))
    try:
        if quota and period and int(quota[0]) > 0 and int(period[0]) > 0:
            return int(quota[0]) / int(period[0])
    except ValueError:
        pass
    return None


def _up(mount, path):
    """The cgroup's directory under ``mount`` and its ancestors up to ``mount`` (a limit on
    any of them applies), those that exist: inside a container the path of
    /proc/self/cgroup may be the host's, and the mount the container's own cgroup."""
    parts = [p for p in path.split("/") if p]
    for n in range(len(parts), -1, -1):
        d = os.path.join(mount, *parts[:n])
        if os.path.isdir(d):
            yield d


def cgroup_cpu_limit(proc_cgroup="/proc/self/cgroup", root="/sys/fs/cgroup"):
    """(CPUs, cgroup) of the tightest CPU quota on this process's cgroup and its ancestors
    (a float: 1.5 is one and a half cores' time per period), and which cgroup that is (its
    path, "v1:/..." or "v2:/..."); (None, "") without a quota (or without cgroups).

    Reads cgroup v2's ``cpu.max`` (under ``root``, or ``root``/unified on a hybrid mount)
    and cgroup v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (under ``root``/cpu or the
    hierarchy's ``root``/<controllers> mount, e.g. cpu,cpuacct), as the kernel documents them
    (Documentation/admin-guide/cgroup-v2.rst, "cpu.max"; scheduler/sched-bwc.rst).
    """
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None, ""
    best, where = None, ""
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        if hierarchy == "0" and controllers == "":
            mounts, quota, kind = (root, os.path.join(root, "unified")), _quota_v2, "v2"
        elif "cpu" in controllers.split(","):
            mounts = (os.path.join(root, controllers), os.path.join(root, "cpu"))
            quota, kind = _quota_v1, "v1"
        else:
            continue
        for mount in mounts:
            if not os.path.isdir(mount):
                continue
            for d in _up(mount, path):
                q = quota(d)
                if q is not None and (best is None or q < best):
                    rel = os.path.relpath(d, mount)
                    best, where = q, "%s:/%s" % (kind, "" if rel == "." else rel)
            break
    return best, where


def usable_cores():
    """Whole cores this process may use: its affinity, capped by its cgroup's CPU quota
    (rounded down, at least 1)."""
    cores = affinity_cores()
    quota, _ = cgroup_cpu_limit()
    if quota is not None:
        cores = min(cores, max(1, int(quota)))
    return cores
