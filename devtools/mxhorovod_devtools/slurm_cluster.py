"""A real Slurm cluster on this machine, its nodes made of network namespaces.

:class:`SlurmCluster` builds, and always tears down again:

- the hosts ``h1..hN`` of :class:`~mxhorovod_devtools.netns_hosts.NetnsHosts` (one network
  namespace each, on a bridge);
- one ``munged`` with a private key, whose socket (a path, so every namespace reaches it)
  the daemons and the clients use;
- ``slurmctld`` in the root namespace, on the bridge's address, under ``unshare -u`` with
  the host name of ``SlurmctldHost``;
- one ``slurmd`` per host, started inside the host's namespace under ``unshare -u`` with
  the host's name (so every task sees its node's name), with its own spool, pid, log and
  ``TmpFS`` paths, and ``CPUs`` per node as asked (``SlurmdParameters=config_overrides``:
  the nodes may claim more CPUs than the machine has).

Every file (slurm.conf, cgroup.conf, the key, logs, spools) lies under one private temporary
directory; the clients find the cluster through ``SLURM_CONF`` (:meth:`SlurmCluster.env`).
``MpiDefault=none``, Slurm's own default and a common site setting.
Jobs move their data between nodes over the veths (``UCX_TLS=tcp,self``,
``UCX_NET_DEVICES=eth0`` in :meth:`SlurmCluster.env`).

    with SlurmCluster(nodes=2, cpus=2) as cluster:
        proc = cluster.sbatch("#!/bin/bash\\nsrun hostname\\n", ["-N2"], timeout=60)
        print(proc.job_output)

Needs root (namespaces, daemons as root) and Debian's packages ``slurmctld slurmd
slurm-client munge`` (Slurm 22.05); without them :class:`SlurmUnavailable` says why.
"""
import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from mxhorovod_devtools.mpirun import worker_env
from mxhorovod_devtools.netns_hosts import CLUSTER_ENV, NetnsHosts, NetnsUnavailable, _pid_alive

__all__ = ["SlurmUnavailable", "SlurmCluster", "INSTALL_HINT"]

INSTALL_HINT = "apt-get install -y slurmctld slurmd slurm-client munge libpmix-dev"
_DAEMONS = ("munged", "slurmctld", "slurmd")
_CLIENTS = ("sbatch", "srun", "salloc", "scontrol", "scancel", "sinfo", "squeue")
_START_LIMIT_S = 60.0
_TMP_PREFIX = "mxh-slurm-"  # + the owner's pid: a dead owner's cluster is stale

_SLURM_CONF = """\
# Written by mxhorovod_devtools/slurm_cluster.py for one test run.
ClusterName={cluster}
SlurmctldHost={controller}({address})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job may start again after cred_expire (default 120 s), when the scheduler
# next runs (default every 60 s): a test's requeue within seconds.
AuthInfo=socket={munge_socket},cred_expire=5
StateSaveLocation={tmp}/ctld-state
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmctldLogFile={tmp}/slurmctld.log
SlurmdSpoolDir={tmp}/spool/%n
SlurmdPidFile={tmp}/slurmd.%n.pid
SlurmdLogFile={tmp}/slurmd.%n.log
TmpFS={tmp}/tmpfs/%n
PluginDir={plugin_dir}
MpiDefault=none
# Inside a namespace, no cgroup of its own: processes tracked through /proc, no binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The nodes' CPUs come from this file, not from the machine (a test's 2-CPU nodes on a
# 2-core machine, several of them).
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=300
MessageTimeout=10
{nodes}
PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""
# slurmd fails at start inside a namespace unless told which cgroup plugin to load.
_CGROUP_CONF = "CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n"


def _processes_using(directory):
    """Pids of the processes whose command line or SLURM_CONF names ``directory`` (the
    daemons, and the jobs they started: they inherit SLURM_CONF)."""
    found = []
    needle = directory.encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                cmdline = f.read()
            with open("/proc/%s/environ" % name, "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if needle in cmdline or b"SLURM_CONF=" + needle in environ:
            found.append(int(name))
    return found


def remove_stale():
    """Kills the daemons and jobs of clusters whose owner process is gone (a test run
    killed before it could tear down), and removes their files. Their namespaces go with
    :func:`mxhorovod_devtools.netns_hosts.remove_stale`."""
    base = tempfile.gettempdir()
    for entry in os.listdir(base):
        owner = entry[len(_TMP_PREFIX):].split("-", 1)[0]
        if not entry.startswith(_TMP_PREFIX) or not owner.isdigit() or _pid_alive(int(owner)):
            continue
        directory = os.path.join(base, entry)
        for pid in _processes_using(directory):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(directory, ignore_errors=True)


class SlurmUnavailable(RuntimeError):
    """A Slurm cluster cannot be made here; the message says why (and what to install)."""


def unavailable_reason():
    """None when a :class:`SlurmCluster` can be tried here, else why not (not root, or a
    program missing)."""
    if os.geteuid() != 0:
        return "a Slurm cluster of namespace hosts needs root (daemons, network namespaces)"
    missing = [p for p in _DAEMONS + _CLIENTS + ("mungekey",)
               if shutil.which(p, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None]
    if missing:
        return "Slurm is not installed (%s missing): %s" % (", ".join(missing), INSTALL_HINT)
    return None


def _which(program):
    return shutil.which(program, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def _plugin_dir():
    for d in ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm",
              "/usr/lib64/slurm", "/usr/lib/slurm"):
        if os.path.isfile(os.path.join(d, "select_cons_tres.so")):
            return d
    raise SlurmUnavailable("no Slurm plugin directory (select_cons_tres.so) found: %s"
                           % INSTALL_HINT)


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """A Slurm cluster of ``nodes`` namespace hosts ``h1..hN``, ``cpus`` CPUs each; a
    context manager that always tears everything down (also when starting fails).

    Attributes (after ``__enter__``): ``hosts`` (the :class:`NetnsHosts`), ``nodes``
    (names), ``cpus`` (per node), ``controller`` (slurmctld's host name), ``address``
    (slurmctld's, the bridge's), ``conf`` (path of slurm.conf), ``tmp`` (the private
    directory of every file).

    Raises (``__enter__``):
        SlurmUnavailable: not root, Slurm or munge not installed, no network namespaces,
            or a daemon that does not start (its log is quoted).
    """

    def __init__(self, nodes=2, cpus=2):
        if nodes < 1 or cpus < 1:
            raise ValueError("SlurmCluster(nodes=%d, cpus=%d): both must be >= 1" % (nodes, cpus))
        self.n, self.cpus = nodes, cpus
        self.hosts, self.nodes, self.tmp, self.conf = None, [], None, None
        self.controller = "mxhctl%d" % os.getpid()
        self.address = None
        self._procs = []  # (name, Popen) of the daemons, stopped in reverse

    # -- building ------------------------------------------------------------------------
    def __enter__(self):
        why = unavailable_reason()
        if why:
            raise SlurmUnavailable(why)
        atexit.register(self.close)
        try:
            self._start()
        except NetnsUnavailable as e:
            self.close()
            raise SlurmUnavailable("no network namespaces: %s" % e) from None
        except BaseException:
            self.close()
            raise
        return self

    def _start(self):
        plugin_dir = _plugin_dir()
        remove_stale()
        self.tmp = tempfile.mkdtemp(prefix="%s%d-" % (_TMP_PREFIX, os.getpid()))
        self.hosts = NetnsHosts(self.n).__enter__()
        self.nodes = list(self.hosts.hosts)
        self.address = "%s.254" % self.hosts.subnet
        for d in ("ctld-state", "munge", "spool", "tmpfs"):
            os.makedirs(os.path.join(self.tmp, d))
        for h in self.nodes:
            os.makedirs(os.path.join(self.tmp, "spool", h))
            os.makedirs(os.path.join(self.tmp, "tmpfs", h))
        munge_socket = os.path.join(self.tmp, "munge", "munge.socket")
        node_lines = "\n".join(
            "NodeName=%s NodeAddr=%s CPUs=%d State=UNKNOWN" % (h, self.hosts.address[h], self.cpus)
            for h in self.nodes)
        self.conf = os.path.join(self.tmp, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(_SLURM_CONF.format(
                cluster="mxh%d" % os.getpid(), controller=self.controller, address=self.address,
                ctld_port=_free_port(), slurmd_port=6818, munge_socket=munge_socket,
                tmp=self.tmp, plugin_dir=plugin_dir, nodes=node_lines,
                node_list=",".join(self.nodes)))
        with open(os.path.join(self.tmp, "cgroup.conf"), "w") as f:
            f.write(_CGROUP_CONF)
        self._start_munged(munge_socket)
        daemon_env = dict(os.environ, SLURM_CONF=self.conf)
        self._spawn("slurmctld", ["unshare", "-u", "bash", "-c", 'hostname "$0" && exec "$@"',
                                  self.controller, _which("slurmctld"), "-D", "-i"],
                    daemon_env, os.path.join(self.tmp, "slurmctld.log"))
        for h in self.nodes:
            self._spawn("slurmd " + h, self.hosts.on_host_cmd(h, [_which("slurmd"), "-D", "-N", h]),
                        daemon_env, os.path.join(self.tmp, "slurmd.%s.log" % h))
        self._wait_idle()

    def _start_munged(self, munge_socket):
        key = os.path.join(self.tmp, "munge", "munge.key")
        proc = subprocess.run([_which("mungekey"), "--create", "--keyfile", key],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=30)
        if proc.returncode != 0:
            raise SlurmUnavailable("mungekey failed: %s" % proc.stdout.strip())
        log = os.path.join(self.tmp, "munge", "munged.log")
        self._spawn("munged", [_which("munged"), "--foreground", "--force",
                               "--socket", munge_socket, "--key-file", key, "--log-file", log,
                               "--pid-file", os.path.join(self.tmp, "munge", "munged.pid"),
                               "--seed-file", os.path.join(self.tmp, "munge", "munged.seed")],
                    dict(os.environ), log)
        deadline = time.monotonic() + _START_LIMIT_S
        while not os.path.exists(munge_socket):
            self._check_alive()
            if time.monotonic() > deadline:
                raise SlurmUnavailable("munged made no socket in %gs:\n%s"
                                       % (_START_LIMIT_S, _tail(log)))
            time.sleep(0.05)

    def _spawn(self, name, argv, env, log):
        out = open(log + ".out", "ab")
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            out.close()
        proc.log = log
        self._procs.append((name, proc))

    def _check_alive(self):
        for name, proc in self._procs:
            if proc.poll() is not None:
                raise SlurmUnavailable("%s exited at start (status %s):\n%s\n%s" % (
                    name, proc.returncode, _tail(proc.log), _tail(proc.log + ".out")))

    def _wait_idle(self):
        """Waits until every node is registered and idle."""
        deadline = time.monotonic() + _START_LIMIT_S
        states = ""
        while time.monotonic() < deadline:
            self._check_alive()
            proc = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=30)
            states = proc.stdout.strip()
            idle = {line.split()[0] for line in states.splitlines()
                    if len(line.split()) == 2 and line.split()[1] == "idle"}
            if proc.returncode == 0 and idle >= set(self.nodes):
                return
            time.sleep(0.2)
        raise SlurmUnavailable("the nodes did not all come up idle in %gs (sinfo: %s):\n%s" % (
            _START_LIMIT_S, states, "\n".join(_tail(p.log) for _, p in self._procs)))

    # -- tearing down --------------------------------------------------------------------
    def close(self):
        """Cancels every job, stops the daemons, removes the hosts and every file
        (idempotent)."""
        if self.conf and any(name == "slurmctld" and p.poll() is None for name, p in self._procs):
            try:
                self.run(["scancel", "--full", "--quiet", "-u", "root"], timeout=15)
            except Exception:  # noqa: BLE001 - tearing down regardless
                pass
        while self._procs:
            name, proc = self._procs.pop()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        if self.hosts is not None:
            self.hosts.close()  # kills what is left in the namespaces (slurmstepd, tasks)
            self.hosts = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        atexit.unregister(self.close)

    def __exit__(self, *exc):
        self.close()
        return False

    # -- using ---------------------------------------------------------------------------
    def env(self, extra=None, network=True):
        """The environment for a Slurm client (sbatch, srun, ...) started here, and so for
        the jobs (they get the submitter's environment): this process's, the tests'
        (:func:`mxhorovod_devtools.mpirun.worker_env`: the checkout on PYTHONPATH, one
        OpenMP thread unless set), ``SLURM_CONF``, with ``network`` UCX over eth0 (data
        between nodes crosses the veths), then ``extra``. Variables of an enclosing
        allocation (``SLURM_*`` other than SLURM_CONF) are dropped."""
        env = {k: v for k, v in worker_env().items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = self.conf
        if network:
            env.update(CLUSTER_ENV)
        env.update(extra or {})
        return env

    def run(self, argv, timeout=120, env=None, check=False):
        """Runs a client command (``["srun", "-N2", ...]``) here against this cluster, with
        a timeout. Returns the CompletedProcess (``stdout``: stdout and stderr together).

        Raises:
            AssertionError: it did not end within ``timeout`` seconds (its output quoted;
                every job is cancelled and everything it started is killed), or, with
                ``check``, it exited non-zero.
        """
        proc = subprocess.Popen(argv, env=env or self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # salloc puts its command in a process group of its own: kill the whole session
            # (what still holds the output pipe), then every job.
            _kill_session(proc.pid)
            self.cancel_all()
            try:
                out, _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                out = "(no output: still held open after the kill)"
            raise AssertionError("timed out after %ss: %s\n%s" % (timeout, " ".join(argv),
                                                                 out[-6000:]))
        proc.stdout = out
        if check and proc.returncode != 0:
            raise AssertionError("exit %d: %s\n%s" % (proc.returncode, " ".join(argv), out[-6000:]))
        return proc

    def srun(self, args, timeout=120, env=None):
        """``srun ARGS...`` (a list) from here; see :meth:`run`."""
        return self.run([_which("srun")] + list(args), timeout=timeout, env=env)

    def scontrol(self, *args, timeout=30):
        """``scontrol ARGS...`` output (raises AssertionError on failure)."""
        return self.run([_which("scontrol")] + list(args), timeout=timeout, check=True).stdout

    def sbatch(self, script, args=(), timeout=120, env=None):
        """Submits the batch script (its text) with ``sbatch ARGS...`` and waits for the job
        to end (at most ``timeout`` seconds; then every job is cancelled and AssertionError
        raised). Returns sbatch's CompletedProcess with ``returncode`` the job's exit code
        (sbatch's own when it refused the job), ``job_id``, ``job_state`` (COMPLETED,
        FAILED, ...) and ``job_output``: what the batch script wrote (its ``-o`` file,
        stdout and stderr together).

        The job is polled every 0.2 s (``sbatch --wait`` polls at up to 10 s)."""
        deadline = time.monotonic() + timeout
        fd, path = tempfile.mkstemp(prefix="job-", suffix=".sh", dir=self.tmp)
        with os.fdopen(fd, "w") as f:
            f.write(script)
        os.chmod(path, 0o755)
        output = path[:-3] + ".out"
        proc = self.run([_which("sbatch"), "--parsable", "-o", output, "-D", os.getcwd()] +
                        list(args) + [path], timeout=timeout, env=env)
        first = proc.stdout.strip().splitlines()[:1]
        proc.job_id = first[0].split(";")[0] if first and first[0].split(";")[0].isdigit() else None
        proc.job_state, proc.job_output = None, ""
        if proc.returncode != 0 or proc.job_id is None:
            return proc
        while True:
            fields = self._job_fields(proc.job_id)
            state = fields.get("JobState", "")
            if state and state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING",
                                       "SUSPENDED", "REQUEUED", "RESIZING"):
                break
            if time.monotonic() > deadline:
                self.cancel_all()
                raise AssertionError("job %s still %s after %ss:\n%s" % (
                    proc.job_id, state, timeout, _tail(output, 60)))
            time.sleep(0.2)
        proc.job_state = state
        code, _, sig = fields.get("ExitCode", "0:0").partition(":")
        proc.returncode = int(code) if code.isdigit() and int(code) else \
            (128 + int(sig) if sig.isdigit() and int(sig) else (0 if state == "COMPLETED" else 1))
        if os.path.exists(output):
            with open(output, errors="replace") as f:
                proc.job_output = f.read()
        return proc

    def _job_fields(self, job_id):
        """{field: value} of ``scontrol show job -o JOB_ID`` (empty when unknown)."""
        out = self.run([_which("scontrol"), "show", "job", "-o", str(job_id)], timeout=30).stdout
        return dict(word.split("=", 1) for word in out.split() if "=" in word)

    def cancel_all(self):
        """Cancels every job of this cluster and kills what is left in the nodes."""
        try:
            subprocess.run([_which("scancel"), "--full", "--quiet", "-u", "root"],
                           env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=15)
        except subprocess.TimeoutExpired:
            pass
        if self.hosts is not None:
            # Not slurmd itself: only the job steps' processes (children of slurmstepd).
            keep = {p.pid for _, p in self._procs}
            for pids in self.hosts.pids().values():
                for pid in pids:
                    if pid not in keep and _is_job_process(pid):
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass

    def logs(self):
        """The last lines of every daemon's log (for a failing test's message)."""
        return "\n".join("== %s\n%s" % (name, _tail(p.log)) for name, p in self._procs)


def _kill_session(sid):
    """SIGKILL to every process of session ``sid`` (its leader included)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 3 and fields[3] == str(sid):
            try:
                os.kill(int(name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _is_job_process(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip() != "slurmd"
    except OSError:
        return False


def _tail(path, lines=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no %s)" % path
