"""Host discovery of an elastic run inside a Slurm allocation, with no script of the user's.

``mxhorovodrun --min-np 2 --max-np 4 python train.py`` inside ``sbatch`` or ``salloc``
(neither ``-H`` nor ``--hostfile`` nor ``--host-discovery-script``) takes its hosts from
the allocation:

- the nodes are the job's NodeList as ``scontrol show job`` gives it now (Slurm removes a
  failed node from a job that runs with ``--no-kill``), in Slurm's order;
- a node whose state is DOWN, DRAIN, FAIL, NOT_RESPONDING (``*``), POWER_DOWN,
  REBOOT or MAINT is left out, and comes back when Slurm says it is usable again;
- each node has the slots of its tasks in the allocation (SLURM_TASKS_PER_NODE, as
  ``2(x3),1``), or ``--slots-per-host``.

After a job fails with no lost host known, each node is probed with a job step (srun)
instead of ssh. Slurm's controller is asked at most once every :data:`QUERY_PERIOD_S` seconds; between
two queries the last answer stands. Uses Slurm's own ``scontrol`` (on every node of an
allocation) to read and expand node lists.
"""
import re
import subprocess
import threading
import time

from mxhorovodrun.discovery import DiscoveryError

__all__ = ["in_allocation", "tasks_per_node", "SlurmDiscovery", "QUERY_PERIOD_S",
           "BAD_STATES"]

QUERY_PERIOD_S = 5.0
QUERY_TIMEOUT_S = 20.0
PROBE_TIMEOUT_S = 30.0
# Node state words (scontrol's State=, joined by '+') that make a node unusable.
BAD_STATES = frozenset(["DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING",
                        "NOT_RESPONDING", "NO_RESPOND", "POWER_DOWN", "POWERED_DOWN",
                        "POWERING_DOWN", "POWERING_UP", "REBOOT_ISSUED", "REBOOT_REQUESTED",
                        "MAINTENANCE", "MAINT", "FUTURE", "UNKNOWN"])
_REPEAT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def in_allocation(environ):
    """Whether ``environ`` is inside a Slurm job (SLURM_JOB_ID and a node list set)."""
    return bool(environ.get("SLURM_JOB_ID") and
                (environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")))


def tasks_per_node(text):
    """'2(x3),1' (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE) -> [2, 2, 2, 1].

    Raises:
        ValueError: an item that is not N or N(xK), with N >= 0 and K >= 1.
    """
    counts = []
    for item in (text or "").split(","):
        m = _REPEAT.match(item.strip())
        if not m or (m.group(2) is not None and int(m.group(2)) < 1):
            raise ValueError("%r is not a Slurm count list like 2(x3),1" % text)
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


class SlurmDiscovery:
    """``find()`` -> [(node, slots), ...] of the allocation's usable nodes (see the module).

    Args:
        environ: the launcher's environment (SLURM_JOB_ID, SLURM_JOB_NODELIST,
            SLURM_TASKS_PER_NODE).
        slots_per_host: slots of every node (--slots-per-host), else the node's tasks.
        run: ``subprocess.run``-like (tests).
        clock: seconds, monotonic (tests).
    """

    def __init__(self, environ, slots_per_host=None, run=subprocess.run, clock=time.monotonic):
        self.environ = environ
        self.job_id = environ["SLURM_JOB_ID"]
        self.slots_per_host = slots_per_host
        self.run = run
        self.clock = clock
        self.script = "the Slurm allocation of job %s" % self.job_id  # (named in errors)
        start_list = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
        nodes = self._hostnames(start_list)
        tasks = []
        if environ.get("SLURM_TASKS_PER_NODE"):
            try:
                tasks = tasks_per_node(environ["SLURM_TASKS_PER_NODE"])
            except ValueError as e:
                raise self._error("SLURM_TASKS_PER_NODE: %s" % e) from None
        # Tasks per node as the job started (the list follows the node list's order).
        self.tasks = dict(zip(nodes, tasks)) if len(tasks) == len(nodes) else {}
        self._last = None
        self._last_time = None

    def _error(self, text):
        return DiscoveryError("%s: %s" % (self.script, text))

    def _scontrol(self, *words):
        try:
            proc = self.run(["scontrol"] + list(words), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            timeout=QUERY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise self._error("scontrol %s did not answer within %g s"
                              % (" ".join(words), QUERY_TIMEOUT_S)) from None
        except OSError as e:
            raise self._error("cannot run scontrol (Slurm's client, on every node of an "
                              "allocation): %s" % (e.strerror or e)) from None
        out = proc.stdout.decode(errors="replace") if isinstance(proc.stdout, bytes) \
            else proc.stdout
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace") if isinstance(proc.stderr, bytes) \
                else proc.stderr
            raise self._error("scontrol %s failed (exit %d): %s"
                              % (" ".join(words), proc.returncode, err.strip()[-300:]))
        return out

    def _hostnames(self, node_list):
        if not node_list or node_list in ("(null)", "None"):
            return []
        return [n for n in self._scontrol("show", "hostnames", node_list).split() if n]

    def _job_nodes(self):
        text = self._scontrol("show", "job", "--oneliner", self.job_id)
        m = re.search(r"(?:^|\s)NodeList=(\S+)", text)
        if not m:
            raise self._error("scontrol show job %s gave no NodeList" % self.job_id)
        return self._hostnames(m.group(1))

    def _usable(self, nodes):
        if not nodes:
            return []
        text = self._scontrol("show", "node", "--oneliner", ",".join(nodes))
        bad = set()
        for line in text.splitlines():
            name = re.search(r"(?:^|\s)NodeName=(\S+)", line)
            state = re.search(r"(?:^|\s)State=(\S+)", line)
            if not name or not state:
                continue
            words = set(w.strip("*~#$@%!^-") for w in state.group(1).upper().split("+"))
            if words & BAD_STATES or state.group(1).endswith("*"):
                bad.add(name.group(1))
        return [n for n in nodes if n not in bad]

    def find(self):
        """The usable nodes with their slots, in the allocation's order.

        Raises:
            DiscoveryError: scontrol fails or does not answer (the message says which
                command and why).
        """
        now = self.clock()
        if self._last is not None and now - self._last_time < QUERY_PERIOD_S:
            return list(self._last)
        nodes = self._usable(self._job_nodes())
        hosts = [(n, self.slots_per_host or self.tasks.get(n) or 1) for n in nodes]
        self._last, self._last_time = hosts, now
        return list(hosts)

    def probe(self, hosts, timeout=PROBE_TIMEOUT_S):
        """Whether each of ``hosts`` ([(host, slots), ...]) still runs a step of this job:
        ``srun --overlap -N1 -n1 -w HOST true`` inside the allocation, all at once, each
        within ``timeout`` seconds (no ssh: a Slurm cluster need not allow it). Returns
        the problems, one text per host that failed, each starting ``host HOST ``."""
        problems = {}

        def one(host):
            argv = ["srun", "--jobid", self.job_id, "--overlap", "-N1", "-n1", "-w", host,
                    "--quiet", "true"]
            try:
                proc = self.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, timeout=timeout)
            except subprocess.TimeoutExpired:
                problems[host] = "host %s did not run a job step within %g s (%s)" % (
                    host, timeout, " ".join(argv))
            except OSError as e:
                problems[host] = "host %s: cannot run srun: %s" % (host, e.strerror or e)
            else:
                if proc.returncode != 0:
                    out = proc.stdout.decode(errors="replace") if isinstance(
                        proc.stdout, bytes) else (proc.stdout or "")
                    problems[host] = "host %s did not run a job step: %s exited with %d%s" % (
                        host, " ".join(argv), proc.returncode,
                        ": " + out.strip()[-300:] if out.strip() else "")
        threads = [threading.Thread(target=one, args=(h,), daemon=True) for h, _ in hosts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [problems[h] for h in sorted(problems)]
