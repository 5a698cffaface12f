"""mxhorovodrun's elastic driver: runs the training as a series of mpirun jobs on the hosts
that the discovery script reports, starting the next job after a host was lost or added.

    mxhorovodrun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh \\
        python train.py

Each job is an ordinary mxhorovodrun job; its environment holds MXHOROVOD_ELASTIC=1, the
job's generation, id and host-set version, and the driver's address (elastic_protocol).
The driver:

- runs the discovery script at start (a failure, or a line other than ``host`` or
  ``host:slots``, is an error at once), then every second while a job runs (failures
  retried; the last good answer stands);
- starts a job on min(usable slots, --max-np) ranks once --min-np slots are there, waiting
  up to --elastic-timeout seconds (else the run ends, naming the lost hosts and why);
- answers rank 0 at each ``state.commit()`` whether the host set changed (a TCP service
  on this host while a job runs, elastic_service.py, answering only requests signed with
  the run's secret: elastic_protocol); if so every rank stops there (exit 75) and the
  next job starts;
- holds a connection from each rank guard (elastic_guards): a host's guards that all
  vanish without a word, before any other host's, mean every job process of that host
  was killed at once (a node-level kill); a guard's SIGTERM means its host is leaving
  (a preemption notice): the host leaves the host set, as above, and the job stops at
  the ranks' next commit or check;
- after a rank was killed or lost a peer, every process of its host was killed, or its
  host stopped answering ssh, leaves that host out (for good, or for
  --blacklist-cooldown-range) and starts the next job, at most --reset-limit times; a
  failure of the script itself ends the run with that job's status;
- gives each job after the first its own HOROVOD_TIMELINE and HOROVOD_AUTOTUNE_LOG file
  (``/tmp/t.json``, then ``/tmp/t.1.json``, ...: elastic_protocol.job_file).

This host, where the driver runs, is the run's single point of failure (as in Horovod).
"""
import copy
import fcntl
import logging
import os
import random
import re
import secrets
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from mxhorovodrun.elastic_protocol import (ENV_DRIVER, ENV_ELASTIC, ENV_GENERATION,
                                           ENV_HOSTS_VERSION, ENV_JOB_ID, ENV_SECRET,
                                           EXIT_HOSTS_UPDATED, KILLED_RE, PEER_LOST_RE,
                                           PER_JOB_FILES, TRANSFER_TIMEOUT_RE,
                                           USER_ERROR_MARKER, job_file)
from mxhorovodrun.elastic_guards import GuardWatch
from mxhorovodrun.elastic_service import HostService
from mxhorovodrun.command import prepare
from mxhorovodrun.discovery import Discovery, DiscoveryError
from mxhorovodrun.slurm_discovery import SlurmDiscovery, in_allocation
from mxhorovodrun.hosts import assign_ranks, hosts_text
from mxhorovodrun.mpi import HYDRA, INTEL_MPI, LaunchError
from mxhorovodrun.output import run_captured
from mxhorovodrun.startup import Deadline, check_hosts, remote_hosts

__all__ = ["DiscoveryError", "Discovery", "Blacklist", "run_elastic"]

log = logging.getLogger("mxhorovodrun")

DEFAULT_ELASTIC_TIMEOUT = 600
DISCOVERY_PERIOD_S = 1.0


class Blacklist:
    """Hosts left out after a failure: for good, or, with ``cooldown`` = (low, high)
    seconds, for low * 2**(failures - 1) seconds (at most high), plus up to 10% jitter."""

    def __init__(self, cooldown=None, clock=time.monotonic):
        self.cooldown = cooldown
        self.clock = clock
        self.failures = {}
        self.until = {}
        self.reasons = {}

    def add(self, host, reason):
        n = self.failures.get(host, 0) + 1
        self.failures[host] = n
        self.reasons[host] = reason
        if self.cooldown is None:
            self.until[host] = float("inf")
        else:
            low, high = self.cooldown
            delay = min(high, low * 2 ** (n - 1))
            self.until[host] = self.clock() + delay * (1 + 0.1 * random.random())

    def blocked(self, host):
        return self.until.get(host, 0) > self.clock()


def _nic_address(nic):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), 0x8915,  # SIOCGIFADDR
                             struct.pack("256s", nic.encode()[:15]))
    return socket.inet_ntoa(packed[20:24])


def driver_address(hosts, nics):
    """The address the ranks reach this host at: the first of --network-interfaces, else
    127.0.0.1 when every host is this one, else this host's name resolved."""
    if nics:
        try:
            return _nic_address(sorted(nics)[0])
        except OSError:
            pass
    if not remote_hosts(hosts):
        return "127.0.0.1"
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.gethostname()


class _Scanner:
    """A console file for the output relay: writes through to ``target`` and notes the
    markers of the ranks' lines (killed ranks, lost peers, script errors)."""

    _TAG = re.compile(rb"^(?:.*? )?\[(\d+)\] ")

    def __init__(self, target, events):
        self.target = target
        self.events = events
        self.pending = b""

    def write(self, data):
        self.target.write(data)
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            self._scan(line.decode(errors="replace"))

    def flush(self):
        self.target.flush()

    def _scan(self, line):
        m = KILLED_RE.search(line)
        if m:
            self.events["killed"][int(m.group(1))] = m.group(2)
            return
        m = PEER_LOST_RE.search(line)
        if m:
            self.events["peer_lost"].append((int(m.group(1)), m.group(2), m.group(3)))
            return
        m = TRANSFER_TIMEOUT_RE.search(line)
        if m:
            tag = self._TAG.match(line.encode())
            for peer in re.split(r"[,\s]+", m.group(1)):
                if peer:
                    self.events["peer_lost"].append(
                        (int(tag.group(1)) if tag else -1, peer,
                         "transfer from host %s timed out" % m.group(2)))
            return
        if USER_ERROR_MARKER in line and "mxhorovod:" in line:
            self.events["user_error"].append(line.strip())


class _SignalsNoted:
    """mpirun's Popen, noting the signals the output relay forwards to it (the user's
    Ctrl-C or a SIGTERM of the launcher: the run ends, no reset), and telling ``watch``
    first: hydra hands them on to the guards, whose SIGTERM is then no host's notice."""

    def __init__(self, proc, noted, watch=None):
        self._proc = proc
        self._noted = noted
        self._watch = watch

    def send_signal(self, signum):
        self._noted.append(signum)
        if self._watch is not None:
            self._watch.stopping = True
        self._proc.send_signal(signum)

    def __getattr__(self, name):
        return getattr(self._proc, name)


def make_discovery(args, environ):
    """The run's discovery: its script's (``--host-discovery-script``), else the Slurm
    allocation's (slurm_discovery.py). Each has ``find()`` -> [(host, slots), ...] and
    ``script`` (what errors name).

    Raises:
        DiscoveryError: no script and not inside an allocation, or the allocation's node
            list cannot be read.
    """
    if args.host_discovery_script:
        return Discovery(args.host_discovery_script, args.slots_per_host)
    if in_allocation(environ):
        return SlurmDiscovery(environ, args.slots_per_host)
    raise DiscoveryError("elastic training needs --host-discovery-script, or a Slurm "
                         "allocation to take the hosts from")


class ElasticDriver:
    """See the module. ``args``: mxhorovodrun's parsed arguments."""

    def __init__(self, args, environ=None, popen=subprocess.Popen, clock=time.monotonic,
                 sleep=time.sleep):
        self.args = args
        self.environ = dict(os.environ if environ is None else environ)
        self.popen = popen
        self.clock = clock
        self.sleep = sleep
        self.discovery = make_discovery(args, self.environ)
        self.blacklist = Blacklist(tuple(args.blacklist_cooldown_range)
                                   if args.blacklist_cooldown_range else None, clock)
        self.timeout = args.elastic_timeout or DEFAULT_ELASTIC_TIMEOUT
        self.min_np = args.min_np
        self.max_np = args.max_np
        self.job_id = "mxh-%s" % uuid.uuid4().hex[:12]
        self.secret = secrets.token_hex(32)  # the ranks' environment only (elastic_protocol)
        self.hosts_version = 0     # +1 at each change of the hosts seen during a job
        self.hosts = []            # the discovery's last good answer
        self.discovery_error = None
        self.lock = threading.Lock()
        self.job_assignment = None
        self.lost = {}             # host -> why it was left out (for the final error)

    # --- hosts ---
    def _usable(self, hosts):
        return [(h, s) for h, s in hosts if not self.blacklist.blocked(h)]

    def _assignment(self, hosts):
        usable = self._usable(hosts)
        total = sum(s for _, s in usable)
        if total < self.min_np:
            return None
        np = min(total, self.max_np) if self.max_np else total
        return assign_ranks(usable, np)

    def _discover(self):
        try:
            hosts = self.discovery.find()
        except DiscoveryError as e:
            with self.lock:
                if self.discovery_error is None:
                    log.warning("warning: %s; retrying every %g s", e, DISCOVERY_PERIOD_S)
                self.discovery_error = str(e)
            return
        with self.lock:
            self.hosts = hosts
            self.discovery_error = None
            if self.job_assignment is not None and \
                    self._assignment(hosts) != self.job_assignment:
                # Rank 0 sees a new version at its next commit (elastic_protocol).
                self.hosts_version += 1
                self.job_assignment = None  # one bump per job

    def _watch(self, stop):
        while not stop.wait(DISCOVERY_PERIOD_S):
            self._discover()

    def _wait_for_slots(self):
        """The next job's [(host, ranks)], or None after --elastic-timeout (logged)."""
        end = self.clock() + self.timeout
        while True:
            with self.lock:
                assignment = self._assignment(self.hosts)
            if assignment is not None:
                return assignment
            if self.clock() >= end:
                with self.lock:
                    usable = self._usable(self.hosts)
                    error = self.discovery_error
                lost = "; ".join("%s: %s" % (h, why) for h, why in sorted(self.lost.items()))
                log.error("error: only %d slots (%s) for --min-np %d after waiting "
                          "--elastic-timeout %d s; the job ends. Hosts lost: %s%s",
                          sum(s for _, s in usable), hosts_text(usable) or "no host",
                          self.min_np, self.timeout, lost or "none",
                          "; the discovery script fails: %s" % error if error else "")
                return None
            self.sleep(min(DISCOVERY_PERIOD_S, max(0.0, end - self.clock())))
            self._discover()

    # --- one job ---
    def _run_job(self, assignment, generation, version):
        """Runs one job on ``assignment`` started at host-set ``version``, with its own
        host service (listening only while the job runs); returns (exit status, events)."""
        address = driver_address(assignment, self.args.nics)
        watch = GuardWatch(on_leaving=self._leaving)
        with HostService(address, self.secret, lambda: self.hosts_version,
                          watch=watch) as service:
            code, events = self._run_mpirun(assignment, generation, watch, {
                ENV_ELASTIC: "1", ENV_GENERATION: str(generation), ENV_JOB_ID: self.job_id,
                ENV_DRIVER: "%s:%d" % (address, service.port),
                ENV_HOSTS_VERSION: str(version), ENV_SECRET: self.secret})
        events["guards"] = watch
        return code, events

    def _leaving(self, host, rank):
        """A rank guard of ``host`` got SIGTERM (elastic_guards): the host leaves the host
        set now, so the ranks stop at their next check and the next job runs without it."""
        why = "it is leaving (rank %d's guard got SIGTERM)" % rank
        log.warning("mxhorovodrun elastic: host %s is leaving (SIGTERM to rank %d's guard); "
                    "the ranks stop at their next commit or check", host, rank)
        with self.lock:
            self.blacklist.add(host, why)
            self.lost[host] = why
            if self.job_assignment is not None:
                self.hosts_version += 1  # rank 0 sees it at its next check
                self.job_assignment = None  # one bump per job

    def _run_mpirun(self, assignment, generation, watch, elastic_env):
        np = sum(n for _, n in assignment)
        args = copy.copy(self.args)
        args.hosts, args.hostfile, args.num_proc = hosts_text(assignment), None, np
        env = dict(self.environ)
        env.update(elastic_env)
        capture_dir = tempfile.mkdtemp(prefix="mxhorovodrun-")
        mpi, argv, env, notes = prepare(args, environ=env, capture_dir=capture_dir)
        for name in PER_JOB_FILES:  # (-genvall: what env holds is what every rank gets)
            if env.get(name) and job_file(env[name], generation) != env[name]:
                env[name] = job_file(env[name], generation)
                log.warning("mxhorovodrun elastic: %s of job %d: %s", name, generation,
                            env[name])
        if mpi.flavour not in (HYDRA, INTEL_MPI):
            raise LaunchError("elastic training runs with MPICH's hydra or Intel MPI; %s "
                              "is %s" % (mpi.path, mpi.flavour))
        if generation == 0:
            for note in notes:
                log.warning("warning: %s", note)
        log.info("%s", " ".join(shlex.quote(a) for a in argv))
        events = {"killed": {}, "peer_lost": [], "user_error": [], "signals": []}
        console = (_Scanner(sys.stdout.buffer, events), _Scanner(sys.stderr.buffer, events))

        def popen(*a, **kw):
            return _SignalsNoted(self.popen(*a, **kw), events["signals"], watch)
        code = run_captured(argv, env, np, capture_dir, output_filename=args.output_filename,
                            timestamps=args.prefix_output_with_timestamp, console=console,
                            popen=popen)
        return code, events

    def _lost_hosts(self, assignment, events):
        """{host: why} of the job's hosts that were lost."""
        rank_host = [h for h, n in assignment for _ in range(n)]
        lost = {}
        for rank, signal_name in sorted(events["killed"].items()):
            if rank < len(rank_host):
                lost.setdefault(rank_host[rank], "rank %d was killed by %s" % (rank, signal_name))
        names = {h for h, _ in assignment}
        unknown = False
        # A host whose link is down is named by the ranks of every other host, and names
        # them all: with two hosts (or one reporter) that is a tie, which ssh decides below.
        reporters = {}
        for rank, host, text in events["peer_lost"]:
            if host in names:
                where = rank_host[rank] if 0 <= rank < len(rank_host) else None
                reporters.setdefault(host, {})[where] = "rank %d lost it: %s" % (rank, text[:200])
            else:
                unknown = True
        for host, by in reporters.items():
            if len(set(by) - {host}) >= 2 or (len(names) == 2 and len(reporters) == 1):
                lost.setdefault(host, sorted(by.values())[0])
            else:
                unknown = True
        watch = events.get("guards")
        if not lost and watch is not None:
            # Every job process of a host killed at once, the host still up (no line, no
            # peer's report, ssh answers): the guards' connections tell (elastic_guards).
            for host, why in watch.node_lost(assignment).items():
                lost.setdefault(host, why)
            # A host that was leaving (SIGTERM) and was killed before its ranks stopped.
            for host in watch.leaving:
                if host in names:
                    lost.setdefault(host, "it was leaving (SIGTERM) and its ranks ended "
                                    "before the job stopped at a commit")
        if not lost or unknown:
            if hasattr(self.discovery, "probe"):  # inside Slurm: a job step, not ssh
                problems = self.discovery.probe(assignment)
            else:
                problems = check_hosts(assignment, Deadline(30),
                                       ssh_command=self.args.ssh_command,
                                       ssh_port=self.args.ssh_port,
                                       ssh_identity_file=self.args.ssh_identity_file,
                                       environ=self.environ)
            for text in problems:
                for host in names:
                    if text.startswith("host %s " % host):
                        lost.setdefault(host, text)
        return lost

    def run(self):
        """Returns the exit status of the run."""
        try:
            self.hosts = self.discovery.find()
        except DiscoveryError as e:
            log.error("error: %s", e)
            return 1
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(stop,), daemon=True,
                                   name="mxhorovodrun-elastic-discovery")
        watcher.start()
        generation, resets = 0, 0
        try:
            while True:
                assignment = self._wait_for_slots()
                if assignment is None:
                    return 1
                with self.lock:
                    self.job_assignment = assignment
                    version = self.hosts_version  # (a change from here on is seen)
                log.warning("mxhorovodrun elastic: job %d on %d ranks: %s", generation,
                            sum(n for _, n in assignment), hosts_text(assignment))
                started = self.clock()
                code, events = self._run_job(assignment, generation, version)
                with self.lock:
                    self.job_assignment = None
                if events["signals"]:
                    # Before the exit status: a Ctrl-C that reached mpirun while it started
                    # the ranks may leave them running to a normal end (seen once under
                    # load); the user asked to stop all the same.
                    log.error("error: the job was interrupted (signal %d); no reset",
                              events["signals"][-1])
                    return code or 128 + events["signals"][-1]
                if code == 0:
                    return 0
                if events["user_error"] and not (events["killed"] or events["peer_lost"]):
                    # (A rank killed or a peer lost first: the others' errors follow from it.)
                    log.error("error: the training script failed (exit %d: %s); an error of "
                              "the script is not retried", code, events["user_error"][0][:300])
                    return code
                lost = {}
                if code != EXIT_HOSTS_UPDATED or events["killed"] or events["peer_lost"]:
                    lost = self._lost_hosts(assignment, events)
                    if not lost:
                        log.error("error: the job failed (exit %d) and no host was lost; "
                                  "not retried", code)
                        return code
                for host, why in lost.items():
                    log.warning("mxhorovodrun elastic: host %s left out: %s", host, why)
                    self.blacklist.add(host, why)
                    self.lost[host] = why
                if code == EXIT_HOSTS_UPDATED and not lost:
                    log.warning("mxhorovodrun elastic: the hosts changed; job %d ended at a "
                                "commit after %.1f s", generation, self.clock() - started)
                    if set(events["guards"].leaving) >= {h for h, _ in assignment}:
                        # The job as a whole got SIGTERM (a preemption or the end of a
                        # batch job's time): no host is left to go on with.
                        log.error("error: every host of the job is leaving (SIGTERM); the "
                                  "run ends at its last commit")
                        return 128 + signal.SIGTERM
                resets += 1
                if self.args.reset_limit is not None and resets > self.args.reset_limit:
                    log.error("error: --reset-limit %d reached; the job ends",
                              self.args.reset_limit)
                    return code or 1
                generation += 1
                self._discover()
        finally:
            stop.set()


def run_elastic(args, environ=None, popen=subprocess.Popen):
    """Runs the elastic driver for mxhorovodrun's parsed ``args``; returns the exit status."""
    try:
        return ElasticDriver(args, environ, popen).run()
    except (DiscoveryError, LaunchError, ValueError, OSError) as e:
        log.error("error: %s", e)
        return 1
