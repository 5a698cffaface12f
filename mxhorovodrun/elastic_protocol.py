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
"""
import os
import re
import socket

__all__ = ["ENV_ELASTIC", "ENV_GENERATION", "ENV_JOB_ID", "ENV_DRIVER", "ENV_HOSTS_VERSION",
           "ENV_COMMIT_DIR", "EXIT_HOSTS_UPDATED", "EXIT_PEER_LOST", "PEER_LOST_MARKER",
           "USER_ERROR_MARKER", "KILLED_RE", "PEER_LOST_RE", "TRANSFER_TIMEOUT_RE",
           "PER_JOB_FILES", "job_file", "ask_hosts_version"]

# Set by the driver for every rank of an elastic job.
ENV_ELASTIC = "MXHOROVOD_ELASTIC"                  # "1"
ENV_GENERATION = "MXHOROVOD_ELASTIC_GENERATION"    # 0 for the first job, +1 at every reset
ENV_JOB_ID = "MXHOROVOD_ELASTIC_JOB_ID"            # one per mxhorovodrun run: the commits' dir
ENV_DRIVER = "MXHOROVOD_ELASTIC_DRIVER"            # host:port of the driver's host service
ENV_HOSTS_VERSION = "MXHOROVOD_ELASTIC_HOSTS_VERSION"  # the host set this job was started on
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


def ask_hosts_version(address, timeout=5.0):
    """The driver's current host-set version (an int), asked at ``address`` ('host:port').

    Raises:
        OSError: no connection or no answer within ``timeout`` seconds.
        ValueError: an answer that is not a version.
    """
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(b"hosts_version\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(64)
            if not chunk:
                break
            data += chunk
    return int(data.strip())
