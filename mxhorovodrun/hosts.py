"""Hosts and slots for mxhorovodrun: ``-H host1:2,host2:2`` or ``--hostfile FILE``.

A host is a name or address with a number of slots (processes it may run); a bare name
has 1 slot (as with mpirun). Ranks fill the hosts in the given order, each up to its slots,
as horovodrun and mpirun's default by-slot mapping assign them.
"""
import re

__all__ = ["parse_hosts", "parse_hostfile", "assign_ranks", "hosts_text"]

_HOST = re.compile(r"^[\w.-]+$")


def _host(name, slots, where):
    if not _HOST.match(name):
        raise ValueError("%s: %r is not a host name or address" % (where, name))
    try:
        n = int(slots)
    except ValueError:
        raise ValueError("%s: slots of %r must be an integer, got %r" % (where, name, slots)) from None
    if n < 1:
        raise ValueError("%s: %r has %d slots; a host needs at least 1" % (where, name, n))
    return name, n


def parse_hosts(text):
    """'h1:2,h2:3,h3' -> [('h1', 2), ('h2', 3), ('h3', 1)].

    Raises:
        ValueError: an empty list, an entry that is not name or name:slots, slots < 1, or
            a host named twice.
    """
    hosts = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise ValueError("-H/--hosts %r: empty entry (expected host1:2,host2:2)" % text)
        name, _, slots = item.partition(":")
        hosts.append(_host(name, slots or "1", "-H/--hosts %r" % text))
    return _no_duplicates(hosts, "-H/--hosts %r" % text)


def parse_hostfile(path):
    """Reads a host file: one host a line, as 'host slots=N' (horovodrun's and Open MPI's
    format), 'host:N' (MPICH's) or 'host' (1 slot); blank lines and '#' comments skipped.

    Raises:
        ValueError: an unreadable file, a malformed line (named with its number), or no host.
    """
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ValueError("--hostfile %s: %s" % (path, e.strerror or e)) from None
    hosts = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        where = "--hostfile %s, line %d (%r)" % (path, number, line)
        words = text.split()
        name, slots = words[0], "1"
        if ":" in name:
            name, _, slots = name.partition(":")
        for word in words[1:]:
            key, eq, value = word.partition("=")
            if key in ("slots", "max_slots", "max-slots") and eq:
                if key == "slots":
                    slots = value
            else:
                raise ValueError("%s: expected 'host slots=N' or 'host:N'" % where)
        hosts.append(_host(name, slots, where))
    if not hosts:
        raise ValueError("--hostfile %s names no host" % path)
    return _no_duplicates(hosts, "--hostfile %s" % path)


def _no_duplicates(hosts, where):
    seen = set()
    for name, _ in hosts:
        if name in seen:
            raise ValueError("%s: host %r is listed twice" % (where, name))
        seen.add(name)
    return hosts


def assign_ranks(hosts, np):
    """Processes per host when np ranks fill the hosts in order: [(host, count), ...]
    (hosts that get no rank are left out).

    Raises:
        ValueError: np is larger than the slots of all hosts together.
    """
    total = sum(slots for _, slots in hosts)
    if np > total:
        raise ValueError("-np %d is more than the %d slots of %s" % (np, total, hosts_text(hosts)))
    out, left = [], np
    for name, slots in hosts:
        if left == 0:
            break
        take = min(slots, left)
        out.append((name, take))
        left -= take
    return out


def hosts_text(hosts):
    """[('h1', 2), ('h2', 1)] -> 'h1:2,h2:1'."""
    return ",".join("%s:%d" % (name, slots) for name, slots in hosts)
