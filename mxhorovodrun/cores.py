"""How many cores this process may use: its CPU affinity, capped by its cgroup's CPU quota.

A container or a Kubernetes pod with a CPU limit (``docker run --cpus 2``, ``resources.limits.
cpu: 2``) sees every core of the machine (``os.cpu_count()``, and often its affinity too) but
is throttled to the quota: ranks that size their threads or their spinning by the visible
cores then fight for a fraction of them. Standard library only (the launcher imports no
MXNet); ``hvd.init()`` hands the quota to the core, which adds up the host's ranks.
"""
import os

__all__ = ["affinity_cores", "cgroup_cpu_limit", "cgroup_cpu_limits", "usable_cores"]


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


def _ratio(quota, period):
    """quota / period in CPUs when both are positive integers (words of a cgroup file), else
    None."""
    try:
        q, p = int(quota), int(period)
        return q / p if q > 0 and p > 0 else None
    except (TypeError, ValueError, OverflowError):
        return None


def _quota_v2(directory):
    """CPUs allowed by ``cpu.max`` ("$MAX $PERIOD", microseconds; "max" = none) or None."""
    words = _read(os.path.join(directory, "cpu.max"))
    if not words or len(words) < 2 or words[0] == "max":
        return None
    return _ratio(words[0], words[1])


def _quota_v1(directory):
    """CPUs allowed by ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1 = none) or None."""
    quota = _read(os.path.join(directory, "cpu.cfs_quota_us"))
    period = _read(os.path.join(directory, "cpu.cfs_period_us"))
    return _ratio(quota[0], period[0]) if quota and period else None


def _up(mount, path):
    """The cgroup's directory under ``mount`` and its ancestors up to ``mount`` (a limit on
    any of them applies), those that exist: inside a container the path of
    /proc/self/cgroup may be the host's, and the mount the container's own cgroup. Nothing
    for a path with "..": a process outside its cgroup namespace's root, whose cgroup is not
    under this mount."""
    parts = [p for p in path.split("/") if p]
    if ".." in parts:
        return
    for n in range(len(parts), -1, -1):
        d = os.path.join(mount, *parts[:n])
        if os.path.isdir(d):
            yield d


def _hierarchies(lines, root):
    """(mount, cgroup path, quota reader, "v1"/"v2") of each hierarchy that has the cpu
    controller, from the lines of /proc/self/cgroup."""
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        if hierarchy == "0" and controllers == "":
            # cgroup v2: mounted at root, or at root/unified beside v1 hierarchies (hybrid).
            unified = root if os.path.exists(os.path.join(root, "cgroup.controllers")) \
                else os.path.join(root, "unified")
            yield unified, path, _quota_v2, "v2"
        elif "cpu" in controllers.split(","):
            for mount in (os.path.join(root, controllers), os.path.join(root, "cpu")):
                if os.path.isdir(mount):
                    yield mount, path, _quota_v1, "v1"
                    break


def cgroup_cpu_limits(proc_cgroup="/proc/self/cgroup", root="/sys/fs/cgroup"):
    """The CPU quotas on this process's cgroup and its ancestors, innermost first: a list of
    (CPUs, key, path), CPUs a float (1.5 is one and a half cores' time per period), key
    "dev:inode" of the cgroup's directory (the same cgroup has the same key in every
    process of the host, whatever path its namespace shows), path "v1:/..." or "v2:/..." as
    this process sees it. Empty without a quota (or without cgroups). Never raises.

    Reads cgroup v2's ``cpu.max`` (under ``root``, or ``root``/unified on a hybrid mount)
    and cgroup v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (under the hierarchy's
    ``root``/<controllers> mount, e.g. cpu,cpuacct, or ``root``/cpu), as the kernel
    documents them (Documentation/admin-guide/cgroup-v2.rst, "cpu.max";
    scheduler/sched-bwc.rst).
    """
    try:
        with open(proc_cgroup, "rb") as f:
            lines = os.fsdecode(f.read()).splitlines()
    except OSError:
        return []
    found = []
    for mount, path, quota, kind in _hierarchies(lines, root):
        for d in _up(mount, path):
            q = quota(d)
            if q is None:
                continue
            try:
                st = os.stat(d)
            except OSError:
                continue
            rel = os.path.relpath(d, mount)
            found.append((q, "%d:%d" % (st.st_dev, st.st_ino),
                          "%s:/%s" % (kind, "" if rel == "." else rel)))
        if found:
            break  # the cpu controller is in one hierarchy: one chain of ancestors
    return found


def cgroup_cpu_limit(proc_cgroup="/proc/self/cgroup", root="/sys/fs/cgroup"):
    """(CPUs, path) of the tightest of :func:`cgroup_cpu_limits` (what bounds this process
    alone), or (None, "")."""
    limits = cgroup_cpu_limits(proc_cgroup, root)
    if not limits:
        return None, ""
    cpus, _, path = min(limits, key=lambda limit: limit[0])
    return cpus, path


def usable_cores():
    """Whole cores this process may use: its affinity, capped by its cgroup's CPU quota
    (rounded down, at least 1)."""
    cores = affinity_cores()
    quota, _ = cgroup_cpu_limit()
    if quota is not None:
        cores = min(cores, max(1, int(quota)))
    return cores
