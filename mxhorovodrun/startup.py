"""--start-timeout: the launcher's checks before mpirun starts, within one deadline.

horovodrun gives its checks (ssh to every host, finding the interfaces) and the start of
its processes --start-timeout seconds (default 30, or HOROVOD_START_TIMEOUT). mxhorovodrun
checks what it can before handing over to mpirun: identifying mpirun (``mpirun
--version``) within the deadline, and, when a timeout is given, that each remote host of
-H/--hostfile answers through the program mpirun will use (ssh, or --ssh-command, with
-p/-i), all hosts in parallel. A host that fails or does not answer in time is named and
nothing starts. Starting the ranks themselves is mpirun's work and is not bounded.
"""
import shlex
import socket
import subprocess
import threading
import time

__all__ = ["DEFAULT_START_TIMEOUT", "Deadline", "remote_hosts", "check_hosts"]

DEFAULT_START_TIMEOUT = 30


class Deadline:
    """``seconds`` from now; :meth:`left` is what remains (never below 0.1 s)."""

    def __init__(self, seconds, clock=time.monotonic):
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds

    def left(self):
        return max(0.1, self._end - self._clock())


def _local_names():
    names = {"localhost", "127.0.0.1", "::1"}
    try:
        name = socket.gethostname()
        names.update({name, name.split(".")[0]})
    except OSError:
        pass
    return names


def remote_hosts(hosts):
    """Names of ``hosts`` ([(host, slots), ...]) that mpirun reaches through ssh: all but
    this host's own names (localhost, 127.x, its host name)."""
    local = _local_names()
    return [h for h, _ in hosts or () if h not in local and not h.startswith("127.")]


def _ssh_argv(host, ssh_command, ssh_port, ssh_identity_file):
    if ssh_command:
        # Called as hydra calls it: -x, the -p/-i words, the host, the command.
        argv = shlex.split(ssh_command) + ["-x"]
    else:
        argv = ["ssh", "-x", "-o", "BatchMode=yes"]
    if ssh_port:
        argv += ["-p", str(ssh_port)]
    if ssh_identity_file:
        argv += ["-i", ssh_identity_file]
    return argv + [host, "true"]


def check_hosts(hosts, deadline, ssh_command=None, ssh_port=None, ssh_identity_file=None,
                environ=None):
    """Runs ``SSH HOST true`` for every remote host at once, each bounded by what is left of
    ``deadline``. Returns the problems found, one text per host ([] when all answered)."""
    problems = {}
    timeout = deadline.left()

    def one(host):
        argv = _ssh_argv(host, ssh_command, ssh_port, ssh_identity_file)
        shown = " ".join(shlex.quote(a) for a in argv)
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=timeout, env=environ)
        except subprocess.TimeoutExpired:
            problems[host] = ("host %s did not answer within --start-timeout %d s (%s)"
                              % (host, deadline.seconds, shown))
        except OSError as e:
            problems[host] = "cannot run %s: %s" % (shown, e.strerror or e)
        else:
            if proc.returncode != 0:
                out = proc.stdout.decode(errors="replace").strip()
                problems[host] = ("host %s is not reachable: %s exited with %d%s"
                                  % (host, shown, proc.returncode, (": " + out) if out else ""))

    threads = [threading.Thread(target=one, args=(h,), daemon=True)
               for h in remote_hosts(hosts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [problems[h] for h in sorted(problems)]
