"""What the elastic driver learns from the rank guards' connections during one job
(elastic_protocol: ``guard``, ``leaving``, ``bye``), and which host that makes lost.

Why the guards' connections: when every job process of one host is killed at once (a
cgroup OOM kill, a node health check, a preemption), nothing of that host can print a
line, hydra's own message names no host (``control_cb ... assert (!closed) failed``), and
the host still answers ssh. But the kernel closes the killed guards' connections to the
driver at the kill, before hydra's reaction can end any other host's guard: hydra ends
them only after it noticed the loss, at least one hop later. So the host whose guards
all closed without a ``bye``, all before any guard of another host ended, is the one
whose processes were killed. A guard that ends on its own (its rank exited or was
killed with the guard alive) says ``bye`` first, so a plain error of the script is
never taken for a lost host.
"""
import threading
import time

__all__ = ["GuardWatch"]


class GuardWatch:
    """The guards of one job (thread-safe; the host service's thread calls the
    ``on_*`` methods, one id per connection). ``on_leaving(host, rank)``: called at each
    ``leaving`` line (SIGTERM to that guard)."""

    def __init__(self, on_leaving=None, clock=time.monotonic):
        self.on_leaving = on_leaving
        self.clock = clock
        self.stopping = False  # the run is being stopped: a guard's SIGTERM is not a notice
        self.lock = threading.Lock()
        self.guards = {}      # id -> {"rank", "host", "bye": status or None, "closed": s}
        self.leaving = {}     # host -> rank whose guard said so first

    def on_hello(self, key, rank, host):
        with self.lock:
            self.guards[key] = {"rank": rank, "host": host, "bye": None, "closed": None}

    def on_line(self, key, event, status):
        """A guard's line; returns the answer's word for a 'leaving' line ('ok': taken as
        the host's notice; 'stop': the run is being stopped), else None."""
        with self.lock:
            guard = self.guards.get(key)
            if guard is None:
                return None
            if event == "bye":
                guard["bye"] = status
                return None
            if self.stopping:
                return "stop"
            first = guard["host"] not in self.leaving
            self.leaving.setdefault(guard["host"], guard["rank"])
        if first and self.on_leaving is not None:
            self.on_leaving(guard["host"], guard["rank"])
        return "ok"

    def on_close(self, key, when=None):
        """The connection ``key`` ended (read to its end) at ``when`` (monotonic s; default
        now). The service gives every close seen in one round of its selector the same
        time: their order within the round is the selector's, not the network's."""
        with self.lock:
            guard = self.guards.get(key)
            if guard is not None and guard["closed"] is None:
                guard["closed"] = self.clock() if when is None else when

    def node_lost(self, assignment):
        """{host: why} of the hosts of ``assignment`` ([(host, ranks)]) whose every job
        process was killed at once, as the module says; {} when no host stands out."""
        with self.lock:
            guards = [dict(g) for g in self.guards.values()]
        by_host = {}
        for g in guards:
            by_host.setdefault(g["host"], []).append(g)
        expected = dict(assignment)
        lost = {}
        for host, mine in by_host.items():
            if host not in expected or len(mine) < expected[host]:
                continue  # a guard that never said hello: nothing to tell by
            if any(g["bye"] is not None or g["closed"] is None for g in mine):
                continue
            last = max(g["closed"] for g in mine)
            others = [g["closed"] for g in guards if g["host"] != host and
                      g["closed"] is not None]
            if others and min(others) <= last:
                continue
            ranks = sorted(g["rank"] for g in mine)
            lost[host] = ("its job processes were killed at once%s (the rank guards of "
                          "rank%s %s ended without a word, before any other host's)" % (
                              " after it was leaving (SIGTERM)" if host in self.leaving
                              else "", "s" if len(ranks) > 1 else "",
                              ", ".join(map(str, ranks))))
        if len(lost) == len(by_host):
            return {}  # every host at once: the job as a whole was killed, no host was lost
        return lost
