"""What the elastic driver (mxhorovodrun/elastic_driver.py) and the ranks
(mxhorovod/elastic/) agree on: environment variables, exit codes, output markers and the
host-update question. Standard library only: the launcher imports it without MXNet.

A reset is a new mpirun job on the hosts that remain (MPI cannot shrink a running world
reliably, and a process cannot join one). The driver tells why a job ended:

- every rank exits 0: the training function returned; the run is done;
- every rank exits :data:`EXIT_HOSTS_UPDATED`: the ranks stopped at a commit because the
  hosts changed (``HostsUpdatedInterrupt``); the next job starts on the new hosts;
- a rank prints :data:`PEER_LOST_MARKER`, or the rank guard names a rank killed by a
  signal: that host is left out and the job starts again on the others;
- anything else (mxhorovod's excepthook prints :data:`USER_ERROR_MARKER`; a non-zero
  exit): the run ends, with no retry.

The host-update question (rank 0, at each commit) is one line each way over TCP (at most
:data:`LINE_MAX_BYTES`), signed with the run's secret (:data:`ENV_SECRET`; the key is its
text, UTF-8) by HMAC-SHA256 in lowercase hex:

- request: ``hosts_version <nonce> <HMAC(b"hosts_version:" + nonce)>``, the nonce 32
  lowercase hex digits, fresh per request;
- answer: ``<version> <HMAC(b"version:<version>:" + nonce)>``.

The driver answers a request signed with the secret and closes anything else without a
word; the rank takes only an answer signed for its nonce (no replayed or forged answer).

The rank guard's connection (mxhorovod/rank_guard.py, under the driver only): each guard
opens one connection to the same service when its rank starts and holds it to its end,
sending lines (no answers), each signed with the secret over the connection's nonce:

- ``guard <nonce> <rank> <host> <HMAC(b"guard:<nonce>:<rank>:<host>")>``, first;
- ``leaving <HMAC(b"leaving:<nonce>")>``: the guard got SIGTERM (a preemption notice, a
  node drained): this host is leaving. The driver answers ``ok <HMAC(b"ok:<nonce>")>``
  and removes the host from the host set, so the ranks stop at their next check (exit
  75) and the next job starts without it; or, when the run itself is being stopped (the
  launcher got SIGINT or SIGTERM, which hydra hands on to the guards),
  ``stop <HMAC(b"stop:<nonce>")>``: the guard then hands the SIGTERM on to its rank;
- ``bye <status> <HMAC(b"bye:<nonce>:<status>")>``: the guard ends on its own (its rank
  exited, or was killed by a signal with the guard alive). A guard killed by SIGKILL
  says nothing: its connection just closes. When every guard of a host closed without a
  ``bye`` before any other host's guard ended, every job process of that host was killed
  at once (a node-level kill: cgroup OOM, node health check, preemption): that host is
  the lost one (mxhorovodrun/elastic_guards.py decides).
"""
import hashlib
import hmac
import os
import re
import secrets
import socket
import time

__all__ = ["ENV_ELASTIC", "ENV_GENERATION", "ENV_JOB_ID", "ENV_DRIVER", "ENV_HOSTS_VERSION",
           "ENV_SECRET", "ENV_COMMIT_DIR", "EXIT_HOSTS_UPDATED", "EXIT_PEER_LOST",
           "PEER_LOST_MARKER", "USER_ERROR_MARKER", "KILLED_RE", "PEER_LOST_RE",
           "TRANSFER_TIMEOUT_RE", "PER_JOB_FILES", "LINE_MAX_BYTES", "job_file",
           "ask_hosts_version", "answer_hosts_version", "guard_hello", "guard_line",
           "read_guard_hello", "read_guard_line", "guard_answer", "GuardLink"]

# Set by the driver for every rank of an elastic job.
ENV_ELASTIC = "MXHOROVOD_ELASTIC"                  # "1"
ENV_GENERATION = "MXHOROVOD_ELASTIC_GENERATION"    # 0 for the first job, +1 at every reset
ENV_JOB_ID = "MXHOROVOD_ELASTIC_JOB_ID"            # one per mxhorovodrun run: the commits' dir
ENV_DRIVER = "MXHOROVOD_ELASTIC_DRIVER"            # host:port of the driver's host service
ENV_HOSTS_VERSION = "MXHOROVOD_ELASTIC_HOSTS_VERSION"  # the host set this job was started on
# The run's secret for the host service (64 hex digits): in the environment only, never on
# a command line or in a log.
ENV_SECRET = "MXHOROVOD_ELASTIC_SECRET"
# Set by the user (any job): where each host keeps its commits.
ENV_COMMIT_DIR = "MXHOROVOD_ELASTIC_COMMIT_DIR"

# Files the ranks write, named by the user: every job of a run would rewrite the same file
# (a reset starts the script again from the top), so the driver gives each job after the
# first its own (job_file).
PER_JOB_FILES = ("HOROVOD_TIMELINE", "HOROVOD_AUTOTUNE_LOG")

EXIT_HOSTS_UPDATED = 75
EXIT_PEER_LOST = 76

PEER_LOST_MARKER = "mxhorovod elastic: peer lost"
USER_ERROR_MARKER = "failed with an unhandled"
# The rank guard's line for a rank killed by a signal (mxhorovod/rank_guard.py).
KILLED_RE = re.compile(r"rank (\d+) \(pid \d+ on \S+\) was killed by (\w+)")
# The core's line when a transfer between hosts passed its bound (the cross-host issue's
# MXHOROVOD_TRANSFER_TIMEOUT_SECONDS): the peer host(s) and this rank's host.
TRANSFER_TIMEOUT_RE = re.compile(r"transfer between hosts timed out: .* for host (.+?) \(\d+ "
                                 r"bytes over the link of host ([\w.-]+)\)")
# A rank's line: "mxhorovod elastic: peer lost: rank 3 (host h1): <error>" (host may be '?').
PEER_LOST_RE = re.compile(re.escape(PEER_LOST_MARKER) + r": rank (\d+) \(host (\S+)\): (.*)")


def job_file(path, generation):
    """The name job ``generation`` of an elastic run writes for the file ``path``.

    Job 0: ``path`` itself. A later job: the generation inserted before the extension
    (``/tmp/t.json`` -> ``/tmp/t.1.json``), or appended when the name has none
    (``/tmp/tl`` -> ``/tmp/tl.1``). An empty name and ``DYNAMIC`` (HOROVOD_TIMELINE's "no
    file at start") are returned as they are.
    """
    if generation == 0 or not path or path == "DYNAMIC":
        return path
    root, ext = os.path.splitext(path)
    return "%s.%d%s" % (root, generation, ext)


# Longest line of the host-update question, newline included (bytes).
LINE_MAX_BYTES = 256
_REQUEST = re.compile(rb"hosts_version ([0-9a-f]{32}) ([0-9a-f]{64})\n")
_ANSWER = re.compile(rb"(\d{1,19}) ([0-9a-f]{64})\n")


def _mac(secret, message):
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest().encode()


def answer_hosts_version(secret, request, version):
    """The driver's answer (bytes) to ``request``, one line (bytes, newline included), with
    the host-set ``version`` (int); None when the request is not signed with ``secret``."""
    m = _REQUEST.fullmatch(request)
    if not m or not hmac.compare_digest(_mac(secret, b"hosts_version:" + m.group(1)),
                                        m.group(2)):
        return None
    text = b"%d" % version
    return b"%s %s\n" % (text, _mac(secret, b"version:%s:%s" % (text, m.group(1))))


def ask_hosts_version(address, secret, timeout=5.0):
    """The driver's current host-set version (an int), asked at ``address`` ('host:port')
    with the run's ``secret`` (str), within ``timeout`` seconds in all.

    Raises:
        OSError: no connection, or no answer in time (ConnectionError: the driver closed
            the connection without one, as it does for a request with another secret).
        ValueError: an answer that is not a version signed with ``secret`` for this request.
    """
    host, _, port = address.rpartition(":")
    end = time.monotonic() + timeout
    nonce = secrets.token_hex(16).encode()
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(b"hosts_version %s %s\n" % (nonce, _mac(secret, b"hosts_version:" + nonce)))
        data = b""
        while not data.endswith(b"\n") and len(data) < LINE_MAX_BYTES:
            left = end - time.monotonic()
            if left <= 0:
                raise socket.timeout("no answer within %g s" % timeout)
            s.settimeout(left)
            chunk = s.recv(LINE_MAX_BYTES - len(data))
            if not chunk:
                break
            data += chunk
    if not data:
        raise ConnectionError("the driver closed the connection without an answer")
    m = _ANSWER.fullmatch(data)
    if not m or not hmac.compare_digest(_mac(secret, b"version:%s:%s" % (m.group(1), nonce)),
                                        m.group(2)):
        raise ValueError("the answer %r is not a version signed with this run's secret"
                         % data[:100])
    return int(m.group(1))


_GUARD_HELLO = re.compile(rb"guard ([0-9a-f]{32}) (\d{1,9}) ([\w.-]{1,200}) ([0-9a-f]{64})\n")
_GUARD_LINE = re.compile(rb"(leaving|bye)(?: (-?\d{1,4}))? ([0-9a-f]{64})\n")


def guard_hello(secret, rank, host):
    """(nonce, line): the first line of a rank guard's connection (bytes, newline
    included) for ``rank`` (int) on ``host`` (str), signed with ``secret``."""
    nonce = secrets.token_hex(16).encode()
    body = b"%s:%d:%s" % (nonce, rank, host.encode())
    return nonce, b"guard %s %d %s %s\n" % (nonce, rank, host.encode(),
                                             _mac(secret, b"guard:" + body))


def guard_line(secret, nonce, event, status=None):
    """A later line of a guard's connection: ``event`` 'leaving', or 'bye' with the guard's
    exit ``status`` (int), signed over the connection's ``nonce`` (bytes)."""
    if event == "bye":
        return b"bye %d %s\n" % (status, _mac(secret, b"bye:%s:%d" % (nonce, status)))
    return b"leaving %s\n" % _mac(secret, b"leaving:" + nonce)


def read_guard_hello(secret, line):
    """(nonce, rank, host) of a guard's first ``line`` (bytes) signed with ``secret``;
    None for anything else."""
    m = _GUARD_HELLO.fullmatch(line)
    if not m:
        return None
    body = b"%s:%s:%s" % (m.group(1), m.group(2), m.group(3))
    if not hmac.compare_digest(_mac(secret, b"guard:" + body), m.group(4)):
        return None
    return m.group(1), int(m.group(2)), m.group(3).decode()


def read_guard_line(secret, nonce, line):
    """('leaving', None) or ('bye', status) for a later ``line`` of the connection whose
    hello had ``nonce``, signed with ``secret``; None for anything else."""
    m = _GUARD_LINE.fullmatch(line)
    if not m or (m.group(1) == b"bye") != (m.group(2) is not None):
        return None
    if m.group(1) == b"bye":
        expect, status = _mac(secret, b"bye:%s:%s" % (nonce, m.group(2))), int(m.group(2))
    else:
        expect, status = _mac(secret, b"leaving:" + nonce), None
    return (m.group(1).decode(), status) if hmac.compare_digest(expect, m.group(3)) else None


def guard_answer(secret, nonce, word):
    """The driver's answer to a ``leaving`` line: ``word`` 'ok' or 'stop' (bytes line)."""
    return b"%s %s\n" % (word.encode(), _mac(secret, b"%s:%s" % (word.encode(), nonce)))


class GuardLink:
    """A rank guard's connection to the driver (see the module), or nothing outside the
    elastic driver. Every call returns at once or within ``timeout`` seconds and never
    raises: a guard that cannot reach the driver still runs its rank (the driver then
    cannot tell a node-level kill of that host, nor hear its SIGTERM notice)."""

    def __init__(self, environ, rank, host, timeout=5.0):
        self.sock = None
        self.nonce = None
        address = environ.get(ENV_DRIVER, "")
        self.secret = environ.get(ENV_SECRET, "")
        if environ.get(ENV_ELASTIC) != "1" or not address or not self.secret or \
                not str(rank).isdigit():
            return
        name, _, port = address.rpartition(":")
        try:
            self.sock = socket.create_connection((name, int(port)), timeout=timeout)
            self.nonce, line = guard_hello(self.secret, int(rank), host)
            self.sock.sendall(line)
        except (OSError, ValueError):
            self.close()

    def send(self, event, status=None):
        """Sends 'bye' with ``status``; whether it went out."""
        if self.sock is None:
            return False
        try:
            self.sock.sendall(guard_line(self.secret, self.nonce, event, status))
            return True
        except OSError:
            self.close()
            return False

    def leaving(self, timeout=2.0):
        """Tells the driver this host is leaving; True when the driver took it ('ok'),
        False when it answered 'stop', gave no valid answer within ``timeout`` seconds, or
        cannot be reached (the guard then hands the SIGTERM on to its rank)."""
        if not self.send("leaving"):
            return False
        end = time.monotonic() + timeout
        data = b""
        try:
            while not data.endswith(b"\n") and len(data) < LINE_MAX_BYTES:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.sock.settimeout(left)
                chunk = self.sock.recv(LINE_MAX_BYTES - len(data))
                if not chunk:
                    return False
                data += chunk
        except OSError:
            return False
        return hmac.compare_digest(data, guard_answer(self.secret, self.nonce, "ok"))

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
