"""What the processes of a timed-out job were doing, for the test's failure message.

A multi-rank test that times out is killed (mpirun.py); without this its message
said only "timed out", and a rare hang in CI could not be told apart from a slow run. The
report names each process of the job (the launcher and every process below it), its
state and, per thread, the kernel function it waits in; with gdb on the machine, the
native stack of every thread.
"""
import os
import shutil
import subprocess
import time


def descendants(pid):
    """``pid`` and every process below it, parents first. Session ids do not gather a
    job: MPICH's hydra starts its proxy and every rank in sessions of their own."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    if not os.path.exists("/proc/%d" % pid):
        return []
    found = [pid]
    for p in found:  # grows as it goes: breadth first
        found += sorted(children.get(p, []))
    return found


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


def _process_lines(pid):
    cmd = _read("/proc/%d/cmdline" % pid).replace("\0", " ").strip()
    state = _read("/proc/%d/stat" % pid).rpartition(")")[2].split()[:1]
    lines = ["pid %d [%s] %s" % (pid, state[0] if state else "?", cmd[:300])]
    try:
        tids = sorted(int(t) for t in os.listdir("/proc/%d/task" % pid))
    except OSError:
        tids = []
    for tid in tids:
        lines.append("  thread %d %s: waits in %s" % (
            tid, _read("/proc/%d/task/%d/comm" % (pid, tid)),
            _read("/proc/%d/task/%d/wchan" % (pid, tid)) or "-"))
    return lines


def _native_stacks(pid, timeout):
    gdb = shutil.which("gdb")
    if gdb is None or timeout < 1:
        return []
    try:
        out = subprocess.run(
            [gdb, "-batch", "-nx", "-p", str(pid), "-ex", "thread apply all bt 25"],
            capture_output=True, text=True, timeout=timeout).stdout
    except (subprocess.TimeoutExpired, OSError):
        return ["  (gdb gave no stack within %ds)" % timeout]
    return ["  " + line for line in out.splitlines()
            if line.startswith(("#", "Thread"))][:200]


def report(pid, budget=60.0):
    """A text report on process ``pid`` (a job's launcher) and every process below it;
    gdb's stacks while ``budget`` seconds last (the whole report never takes much
    longer)."""
    end = time.monotonic() + budget
    lines = []
    for p in descendants(pid):
        lines += _process_lines(p)
        lines += _native_stacks(p, int(min(20, end - time.monotonic())))
    return "\n".join(lines) or "(process %d has ended)" % pid
