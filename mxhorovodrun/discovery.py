"""The host discovery script of an elastic run (``--host-discovery-script``): what it
prints, ``host`` or ``host:slots`` a line, becomes [(host, slots), ...]. Inside a Slurm
allocation with no script: slurm_discovery.py."""
import os
import re
import subprocess

__all__ = ["DiscoveryError", "Discovery", "DISCOVERY_TIMEOUT_S"]

DISCOVERY_TIMEOUT_S = 30.0
_HOST_LINE = re.compile(r"^([\w.-]+)(?::(\d+))?$")


class DiscoveryError(RuntimeError):
    """The discovery script failed or printed something that is not a host list."""


class Discovery:
    """Runs the host discovery script: ``[(host, slots), ...]`` in its order."""

    def __init__(self, script, slots_per_host=None, timeout=DISCOVERY_TIMEOUT_S):
        self.script = script
        self.slots_per_host = slots_per_host or 1
        self.timeout = timeout

    def find(self):
        """Raises DiscoveryError (the message names the script and what went wrong)."""
        argv = [self.script] if os.path.isfile(self.script) and os.access(self.script, os.X_OK) \
            else ["/bin/sh", "-c", self.script]
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise DiscoveryError("host discovery script %s did not finish within %g s"
                                 % (self.script, self.timeout)) from None
        except OSError as e:
            raise DiscoveryError("cannot run the host discovery script %s: %s"
                                 % (self.script, e.strerror or e)) from None
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()[-500:]
            raise DiscoveryError("host discovery script %s failed (exit %d)%s"
                                 % (self.script, proc.returncode, ": " + err if err else ""))
        hosts, seen = [], set()
        for number, line in enumerate(proc.stdout.decode(errors="replace").splitlines(), 1):
            text = line.strip()
            if not text:
                continue
            m = _HOST_LINE.match(text)
            if not m or (m.group(2) is not None and int(m.group(2)) < 1):
                raise DiscoveryError("host discovery script %s, line %d: %r is not 'host' or "
                                     "'host:slots' (slots >= 1)" % (self.script, number, line))
            if m.group(1) in seen:
                continue
            seen.add(m.group(1))
            hosts.append((m.group(1), int(m.group(2)) if m.group(2) else self.slots_per_host))
        return hosts
