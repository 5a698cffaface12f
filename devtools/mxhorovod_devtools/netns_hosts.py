"""Hosts made of Linux network namespaces, for multi-host tests on one machine.

:class:`NetnsHosts` builds, and always tears down again:

- one bridge in the root namespace, holding the address ``.254`` of a private /24
  (``10.213.K.0/24``, the first K free on this machine, starting from a pid-based value);
- per host ``hI``: a network namespace with loopback up and an ``eth0`` (one end of a veth
  pair; the other end is on the bridge) holding ``.I``; a private ``/etc/hosts`` for that
  namespace (``/etc/netns/NS/hosts``, which ``ip netns exec`` mounts over ``/etc/hosts``
  inside the namespace only; the machine's ``/etc/hosts`` is never edited) naming every host;
- an ssh stand-in script: ``STANDIN [ssh options] HOST COMMAND...`` runs ``COMMAND`` inside
  HOST's namespace, in its own UTS namespace with hostname HOST (so ``gethostname()``
  differs per host), from ``$HOME``, with the small environment an ssh login gives. HOST may
  be the name or the address.

With it, the venv's MPICH starts a job across the hosts as it would over ssh::

    mpirun -launcher ssh -launcher-exec STANDIN -iface BRIDGE -hosts h1,h2 -ppn 2 -np 4 ...

``-iface BRIDGE`` makes the ranks call mpirun back on the bridge address. Or, as a user on
a cluster's first node would, mpirun runs on h1 (:meth:`NetnsHosts.on_host_cmd`) with
``-iface eth0``. Any launcher that takes an ssh stand-in and an interface runs the same way
through :meth:`NetnsHosts.run_cmd`, e.g. (from h1)::

    hosts.run_cmd(hosts.on_host_cmd("h1", ["mxhorovodrun", "-np", "4", "-H", "h1:2,h2:2",
                  "--ssh-command", hosts.standin, "--network-interfaces", "eth0",
                  sys.executable, "train.py"]), env=..., expect_ranks=4)

By default MPICH
and UCX still find one machine (one /dev/shm, one kernel) and move data through shared
memory; :meth:`NetnsHosts.network_env` forces every byte between hosts through the veths
(``UCX_TLS=tcp,self``, ``UCX_NET_DEVICES=eth0``), and with ``MPIR_CVAR_NOLOCAL=1`` also
the bytes between ranks of one host through TCP (over its loopback), which the interface
counters (:meth:`NetnsHosts.counters`, :meth:`NetnsHosts.loopback_bytes`) show.

Names carry this process's pid, so a parallel run does not collide; leftovers of a run that
was killed (its pid gone) are removed at the next start. Creating the hosts needs root (or
CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2; without them :class:`NetnsUnavailable` says
why, and the tests skip with that reason.
"""
import atexit
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

from mxhorovod_devtools.mpirun import mpirun_path, worker_env, worker_path

PREFIX = "mxh"          # every interface and namespace name starts with PREFIX + pid
SUBNET_BASE = "10.213"  # private; only ever configured on our own bridges
# Every byte over TCP, also between the ranks of one host (through its loopback).
FORCE_NETWORK_ENV = {"MPIR_CVAR_NOLOCAL": "1", "UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0"}
# Like a cluster: MPICH's shared memory between the ranks of one host, TCP between hosts.
CLUSTER_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0"}

STANDIN_TEMPLATE = r"""#!/bin/bash
# ssh stand-in written by mxhorovod_devtools/netns_hosts.py: ssh [options] HOST COMMAND...
# Runs COMMAND in HOST's network namespace with hostname HOST, like a login over ssh.
while [ $# -gt 0 ]; do
  case "$1" in
    -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;   # options that take an argument
    --) shift; break ;;
    -*) shift ;;                            # flags (hydra passes -x)
    *) break ;;
  esac
done
host="$1"; shift
case "$host" in
%(cases)s
  *) echo "ssh stand-in: unknown host '$host'" >&2; exit 255 ;;
esac
# ssh joins the remote command's words with spaces and gives it to a shell.
exec ip netns exec "$ns" unshare --uts env -i HOME="$HOME" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c "hostname $name && cd && exec $*"
"""


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here; the message says why."""


def _ip(*args, check=True):
    proc = subprocess.run(["ip"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(args), proc.stdout.strip()))
    return proc


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale():
    """Remove namespaces and links left by runs whose process is gone (killed mid-test)."""
    own = re.compile(r"^%s(\d+)" % PREFIX)
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = own.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _ip("netns", "del", name, check=False)
            shutil.rmtree(os.path.join("/etc/netns", name), ignore_errors=True)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        m = own.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _ip("link", "del", name, check=False)


def fake_hosts_prefix(hosts):
    """Command words that give rank r (PMI_RANK, set by the venv's mpirun) the host name
    ``hosts[r]`` in its own UTS namespace, on this machine's network (shared memory still
    works between the "hosts"). For :func:`mpirun.run_ranks`'s ``prefix``."""
    names = " ".join(shlex.quote(h) for h in hosts)
    return ["unshare", "--uts", "bash", "-c",
            'h=(%s); hostname "${h[$PMI_RANK]}" && exec "$@"' % names, "fake-host"]


def fake_hosts_unavailable():
    """None if :func:`fake_hosts_prefix` works here, else the reason."""
    if shutil.which("unshare") is None:
        return "the 'unshare' command (util-linux) is not installed"
    proc = subprocess.run(["unshare", "--uts", "hostname", "mxh-probe"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=30)
    if proc.returncode != 0:
        return "'unshare --uts' is not allowed here (needs root or CAP_SYS_ADMIN): " + proc.stdout.strip()
    return None


class NetnsHosts:
    """``n`` hosts ``h1..hn`` made of network namespaces; a context manager.

    Attributes (after ``__enter__``): ``hosts`` (names), ``address`` (name -> IPv4),
    ``netns`` (name -> namespace), ``bridge`` (interface name), ``standin`` (path of the
    ssh stand-in), ``subnet`` (``"10.213.K"``).
    """

    def __init__(self, n=2):
        if n < 1 or n > 200:
            raise ValueError("NetnsHosts(n=%d): between 1 and 200 hosts" % n)
        self.n = n
        tag = "%s%d" % (PREFIX, os.getpid())
        self.bridge = tag + "b"
        self.hosts = ["h%d" % (i + 1) for i in range(n)]
        self.netns = {h: "%s-%s" % (tag, h) for h in self.hosts}
        self._veth = {h: "%sv%d" % (tag, i + 1) for i, h in enumerate(self.hosts)}
        self.address, self.subnet, self.standin = {}, None, None
        self._tmp = None
        self._made = []  # (kind, name) in creation order, undone in reverse

    # -- building ------------------------------------------------------------------------
    def _check_allowed(self):
        if shutil.which("ip") is None:
            raise NetnsUnavailable("the 'ip' command (iproute2) is not installed")
        if shutil.which("unshare") is None:
            raise NetnsUnavailable("the 'unshare' command (util-linux) is not installed")
        probe = "%s%d-probe" % (PREFIX, os.getpid())
        proc = _ip("netns", "add", probe, check=False)
        if proc.returncode != 0:
            raise NetnsUnavailable("'ip netns add' is not allowed here (needs root or "
                                   "CAP_SYS_ADMIN): %s" % proc.stdout.strip())
        _ip("netns", "del", probe, check=False)

    def _free_subnet(self):
        used = set(re.findall(r"\b%s\.(\d+)\." % re.escape(SUBNET_BASE),
                              _ip("-4", "addr", check=False).stdout +
                              _ip("-4", "route", check=False).stdout))
        start = os.getpid() % 250
        for k in range(250):
            third = (start + k) % 250 + 1
            if str(third) not in used:
                return "%s.%d" % (SUBNET_BASE, third)
        raise NetnsUnavailable("no free /24 in %s.0.0/16" % SUBNET_BASE)

    def __enter__(self):
        self._check_allowed()
        remove_stale()
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self):
        self.subnet = self._free_subnet()
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made.append(("link", self.bridge))
        _ip("addr", "add", "%s.254/24" % self.subnet, "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, h in enumerate(self.hosts):
            ns, veth, addr = self.netns[h], self._veth[h], "%s.%d" % (self.subnet, i + 1)
            self.address[h] = addr
            _ip("netns", "add", ns)
            self._made.append(("netns", ns))
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._made.append(("link", veth))
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", addr + "/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        hosts_file = "127.0.0.1 localhost\n::1 localhost\n" + "".join(
            "%s %s\n" % (self.address[h], h) for h in self.hosts)
        try:
            os.mkdir("/etc/netns")
            self._made.append(("etcdir", "/etc/netns"))  # removed again if left empty
        except FileExistsError:
            pass
        for h in self.hosts:
            d = os.path.join("/etc/netns", self.netns[h])
            os.makedirs(d)
            self._made.append(("etcdir", d))
            with open(os.path.join(d, "hosts"), "w") as f:
                f.write(hosts_file)
        self._tmp = tempfile.mkdtemp(prefix="mxh-netns-")
        self.standin = os.path.join(self._tmp, "ssh")
        cases = "\n".join('  %s|%s) ns=%s; name=%s ;;' % (h, self.address[h], self.netns[h], h)
                          for h in self.hosts)
        with open(self.standin, "w") as f:
            f.write(STANDIN_TEMPLATE % {"cases": cases})
        os.chmod(self.standin, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)

    # -- tearing down --------------------------------------------------------------------
    def close(self):
        """Remove everything made so far (idempotent; also runs at exit)."""
        if any(kind == "netns" for kind, _ in self._made):
            self.kill_leftovers()
        while self._made:
            kind, name = self._made.pop()
            if kind == "link":
                _ip("link", "del", name, check=False)  # a veth takes its peer with it
            elif kind == "netns":
                _ip("netns", "del", name, check=False)
            elif kind == "etcdir" and name == "/etc/netns":
                try:
                    os.rmdir(name)
                except OSError:
                    pass  # not empty: a parallel run's hosts are in it
            elif kind == "etcdir":
                shutil.rmtree(name, ignore_errors=True)
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        atexit.unregister(self.close)

    def __exit__(self, *exc):
        self.close()
        return False

    # -- using ---------------------------------------------------------------------------
    def counters(self):
        """{host: (bytes received, bytes sent)} of each host's eth0 (read from the bridge
        side of its veth, where received and sent swap)."""
        out = {}
        for h in self.hosts:
            base = "/sys/class/net/%s/statistics/" % self._veth[h]
            with open(base + "tx_bytes") as f:
                rx = int(f.read())
            with open(base + "rx_bytes") as f:
                tx = int(f.read())
            out[h] = (rx, tx)
        return out

    def loopback_bytes(self):
        """{host: bytes sent on the host's loopback so far} (TCP between ranks of one host)."""
        out = {}
        for h in self.hosts:
            proc = subprocess.run(["ip", "netns", "exec", self.netns[h], "cat",
                                   "/sys/class/net/lo/statistics/tx_bytes"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=30)
            out[h] = int(proc.stdout)
        return out

    def limit_rate(self, rate):
        """Caps what each host sends on its eth0 at ``rate`` (tc's syntax: ``1gbit``,
        ``500mbit``), a token bucket, to act like a NIC slower than memory."""
        for h in self.hosts:
            proc = subprocess.run(["ip", "netns", "exec", self.netns[h], "tc", "qdisc", "add", "dev",
                                   "eth0", "root", "tbf", "rate", rate, "burst", "256kb",
                                   "latency", "50ms"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=30)
            if proc.returncode != 0:
                raise RuntimeError("tc on %s: %s" % (h, proc.stdout.strip()))

    def reset_link(self, host):
        """Brings ``host``'s eth0 back up with no cap (after a test took it down or slowed
        it from inside the host; a cap set by :meth:`limit_rate` is removed too)."""
        ns = self.netns[host]
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        _ip("-n", ns, "link", "set", "eth0", "up")

    def ssh_cmd(self, host, argv):
        """argv run on ``host`` through the ssh stand-in (clean login environment)."""
        return [self.standin, host] + [shlex.quote(a) for a in argv]

    def on_host_cmd(self, host, argv):
        """argv run on ``host`` (its namespace and host name) keeping the caller's
        environment: a user's shell on that host, e.g. to start a launcher from the first
        node of the "cluster" with ``--network-interfaces eth0`` as on real hosts."""
        return ["ip", "netns", "exec", self.netns[host], "unshare", "--uts", "bash", "-c",
                'hostname "$0" && exec "$@"', host] + list(argv)

    @staticmethod
    def network_env(within_host_tcp=True):
        """Environment that makes MPICH and UCX send every byte between hosts over TCP on
        eth0; with ``within_host_tcp`` also the bytes between ranks of one host (else those
        go through MPICH's shared memory, as on a cluster)."""
        return dict(FORCE_NETWORK_ENV if within_host_tcp else CLUSTER_ENV)

    def mpirun_cmd(self, hosts, argv, ppn=None, np=None, launch_from=None):
        """mpirun across ``hosts`` (names, or ``"h1:2"`` for two slots) through the stand-in.

        With ``ppn`` each host gets ``ppn`` consecutive ranks; ``np`` defaults to
        ``ppn x len(hosts)`` (or the slots named in ``hosts``). mpirun itself runs here on
        the bridge (``-iface BRIDGE``), or with ``launch_from`` on that host (``-iface
        eth0``, as a user on the first node of a cluster would).
        """
        iface = "eth0" if launch_from else self.bridge
        cmd = [mpirun_path(), "-launcher", "ssh", "-launcher-exec", self.standin,
               "-iface", iface, "-hosts", ",".join(hosts)]
        if ppn is not None:
            cmd += ["-ppn", str(ppn)]
        if np is None and ppn is not None:
            np = ppn * len(hosts)
        if np is not None:
            cmd += ["-np", str(np)]
        cmd += list(argv)
        return self.on_host_cmd(launch_from, cmd) if launch_from else cmd

    def run(self, hosts, script, args=(), ppn=None, np=None, timeout=180, env=None,
            force_network=True, expect_ok=True, launch_from=None):
        """Run a worker script (a path, or a worker's file name) across ``hosts`` under
        mpirun with a timeout, like :func:`mpirun.run_ranks`: with ``expect_ok`` the job must
        exit 0 and every rank print ``RANK <r> OK``. Returns the CompletedProcess, with the
        interface counters before and after as ``.counters_before`` / ``.counters_after``.
        """
        script = worker_path(script)
        full_env = worker_env(dict(FORCE_NETWORK_ENV) if force_network else None)
        if env:
            full_env.update(env)
        if np is None:
            np = ppn * len(hosts) if ppn else sum(int(h.partition(":")[2] or 1) for h in hosts)
        cmd = self.mpirun_cmd(hosts, [sys.executable, script] + [str(a) for a in args],
                              ppn=ppn, np=np, launch_from=launch_from)
        return self.run_cmd(cmd, timeout=timeout, env=full_env,
                            expect_ranks=np if expect_ok else None)

    def run_cmd(self, cmd, timeout=180, env=None, expect_ranks=None):
        """Run any launcher command line (mpirun, mxhorovodrun) with a timeout; everything it
        starts is killed on timeout, here and inside the namespaces. With ``expect_ranks``
        the command must exit 0 and ranks 0..expect_ranks-1 print ``RANK <r> OK``."""
        before = self.counters()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            out, _ = proc.communicate()
            raise AssertionError("timed out after %ss: %s\n%s" % (timeout, " ".join(cmd), out[-6000:]))
        finally:
            # Processes still in a namespace once the launcher is gone: recorded (a test may
            # require none), then killed so that nothing outlives the test.
            leftovers = self.wait_namespaces_empty(grace=5.0)
            self.kill_leftovers()
        proc.stdout = out
        proc.leftover_pids = leftovers
        proc.counters_before, proc.counters_after = before, self.counters()
        if expect_ranks is not None:
            assert proc.returncode == 0, "exit %d\n%s" % (proc.returncode, out[-8000:])
            for r in range(expect_ranks):
                assert "RANK %d OK" % r in out, "rank %d did not finish\n%s" % (r, out[-8000:])
        return proc

    @staticmethod
    def _kill(proc):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def pids(self):
        """{host: [pid, ...]} of the processes running inside each host's namespace."""
        return {h: [int(p) for p in _ip("netns", "pids", self.netns[h], check=False).stdout.split()]
                for h in self.hosts}

    def wait_namespaces_empty(self, grace):
        """Waits up to ``grace`` seconds for every namespace to be empty; returns the pids
        still there ({host: [pid, ...]}, only hosts that have some)."""
        deadline = time.time() + grace
        while True:
            left = {h: p for h, p in self.pids().items() if p}
            if not left or time.time() > deadline:
                return left
            time.sleep(0.1)

    def kill_leftovers(self):
        """SIGKILL every process still inside one of our namespaces (a rank that outlived
        its mpirun must not keep running after the test)."""
        for pids in self.pids().values():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
