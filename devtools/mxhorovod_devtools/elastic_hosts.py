"""Hosts for the elastic tests: an ssh stand-in that gives each host a private commit
directory, and a discovery script that prints a file the test rewrites.

:class:`LocalHosts` (any machine where the tests run as root, else skipped): host names
that all run on this machine, each started through the stand-in in mount and UTS namespaces
of its own (hostname = the host's name), with ``COMMITS`` bind-mounted from
``ROOT/hosts/<host>``: the hosts share this machine's network and memory but not their
commits, as hosts of a cluster would not. :func:`netns_standin` wraps the network-namespace
hosts' stand-in (netns_hosts.py) the same way.
"""
import os
import shutil
import tempfile

STANDIN = r"""#!/bin/bash
# ssh stand-in of mxhorovod_devtools/elastic_hosts.py: ssh [options] HOST COMMAND...
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"; shift
mkdir -p %(root)s/hosts/"$host"
if [ -n "%(inner)s" ]; then
  exec unshare --mount bash -c 'mount --bind %(root)s/hosts/"$0" %(commits)s && exec "$@"' \
    "$host" %(inner)s "${args[@]}"
fi
exec unshare --mount --uts bash -c 'mount --bind %(root)s/hosts/"$0" %(commits)s && hostname "$0" && cd && exec bash -c "$*"' "$host" "$@"
"""


class Unavailable(RuntimeError):
    pass


def unavailable():
    """None when the stand-in can work here (root, unshare), else the reason."""
    if os.geteuid() != 0:
        return "needs root (mount and UTS namespaces)"
    if shutil.which("unshare") is None:
        return "the 'unshare' command (util-linux) is not installed"
    return None


class LocalHosts:
    """A root directory with the stand-in, the discovery script and its host file."""

    def __init__(self, inner_standin=None):
        self.root = tempfile.mkdtemp(prefix="mxh-elastic-")
        self.commits = os.path.join(self.root, "commits")
        os.makedirs(os.path.join(self.root, "hosts"))
        os.makedirs(self.commits)
        self.standin = os.path.join(self.root, "ssh")
        with open(self.standin, "w") as f:
            f.write(STANDIN % {"root": self.root, "commits": self.commits,
                               "inner": inner_standin or ""})
        os.chmod(self.standin, 0o755)
        self.hosts_file = os.path.join(self.root, "hosts.txt")
        self.discovery = os.path.join(self.root, "discover.sh")
        with open(self.discovery, "w") as f:
            f.write("#!/bin/sh\n[ -f %s.fail ] && { echo 'discovery broke' >&2; exit 3; }\n"
                    "cat %s\n" % (self.hosts_file, self.hosts_file))
        os.chmod(self.discovery, 0o755)

    def set_hosts(self, text):
        with open(self.hosts_file + ".tmp", "w") as f:
            f.write(text)
        os.replace(self.hosts_file + ".tmp", self.hosts_file)

    def fail_discovery(self, on=True):
        path = self.hosts_file + ".fail"
        if on:
            open(path, "w").close()
        elif os.path.exists(path):
            os.unlink(path)

    def host_commits(self, host):
        """The commit files host ``host`` holds (its private directory)."""
        out = []
        for top, _, files in os.walk(os.path.join(self.root, "hosts", host)):
            out += [os.path.join(top, f) for f in files]
        return out

    def env(self):
        return {"MXHOROVOD_ELASTIC_COMMIT_DIR": self.commits}

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)
