"""Started by mxhorovodrun (tests/test_runner.py): checks on every rank that the launcher's
settings arrived and that the core took them. Usage: settings_env.py JSON, where JSON holds
"env" (variables and their expected values; a null value: must be unset), "size", and
"init_error" (a text the ValueError of hvd.init() must hold, or null: init must work), and
optionally "hosts" (rank r's expected host name at index r: each rank checks its host name
and, after init, its topology) and "guard" (true: the rank's parent is mxhorovod/rank_guard.py,
a Python without MXNet, and the rank is told its descriptor; false: no guard)."""
import json
import os
import socket
import sys

import mxnet as mx
import numpy as np

import mxhorovod as hvd
from support.topology import check_topology


def check_guard(rank, expected):
    parent = os.getppid()
    with open("/proc/%d/cmdline" % parent, "rb") as f:
        argv = f.read().decode().split("\0")
    guarded = any(os.path.basename(a) == "rank_guard.py" for a in argv[:4])
    assert guarded == expected, "rank %d: parent %s, guard expected: %s" % (rank, argv, expected)
    assert ("MXHOROVOD_GUARD_FD" in os.environ) == expected, (rank, expected)
    if expected:
        # The guard runs by path under -I -S: the standard library only, no MXNet.
        assert argv[1:3] == ["-I", "-S"], (rank, argv)
        with open("/proc/%d/maps" % parent) as f:
            maps = f.read()
        assert "libmxnet" not in maps and "_core" not in maps, (rank, "the guard loaded MXNet")
        # The rank leads a process group of its own (the guard forwards signals to it).
        assert os.getpgid(0) == os.getpid() != os.getpgid(parent), (rank, os.getpgid(0))


def main():
    want = json.loads(sys.argv[1])
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "-1")))
    for name, value in want["env"].items():
        assert os.environ.get(name) == value, "rank %d: %s=%r, expected %r" % (
            rank, name, os.environ.get(name), value)
    if "guard" in want:
        check_guard(rank, want["guard"])
    hosts = want.get("hosts")
    if hosts:
        assert socket.gethostname() == hosts[rank], "rank %d runs on %s, expected %s" % (
            rank, socket.gethostname(), hosts[rank])
    if want.get("init_error"):
        # A value the core refuses: its error proves the variable reached it.
        try:
            hvd.init()
        except ValueError as e:
            assert want["init_error"] in str(e), "rank %d: %s" % (rank, e)
            print("RANK %d OK" % rank, flush=True)
            return
        raise AssertionError("rank %d: init accepted the environment" % rank)
    hvd.init()
    assert hvd.rank() == rank and hvd.size() == want["size"], (hvd.rank(), hvd.size())
    if hosts:
        check_topology(hvd, hosts)
    total = hvd.allreduce(mx.nd.array([hvd.rank() + 1.0]), op=hvd.Sum, name="runner.sum")
    np.testing.assert_allclose(total.asnumpy(), [want["size"] * (want["size"] + 1) / 2])
    print("RANK %d OK" % hvd.rank(), flush=True)


if __name__ == "__main__":
    main()
