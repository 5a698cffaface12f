"""The driver's view of the rank guards (mxhorovodrun/elastic_guards.py) and their lines
on its host service (elastic_protocol's guard, leaving, bye): which host a node-level kill
took, and what a SIGTERM notice gets as an answer. No MPI, no ranks."""
import socket
import time

import pytest

from mxhorovodrun.elastic_service import HostService
from mxhorovodrun.elastic_guards import GuardWatch
from mxhorovodrun.elastic_protocol import GuardLink, guard_hello, guard_line

SECRET = "cd" * 32
ASSIGNMENT = [("h1", 2), ("h2", 2)]


def watch_with(events):
    """A GuardWatch fed ``events``: (rank, host, closed at, bye status or None)."""
    w = GuardWatch()
    for rank, host, closed, bye in events:
        w.on_hello(rank, rank, host)
        if bye is not None:
            w.on_line(rank, "bye", bye)
        if closed is not None:
            w.on_close(rank, closed)
    return w


def test_the_host_whose_guards_all_vanished_first_is_lost():
    w = watch_with([(0, "h1", 5.0, None), (1, "h1", 5.0, None),
                    (2, "h2", 1.0, None), (3, "h2", 1.1, None)])
    assert list(w.node_lost(ASSIGNMENT)) == ["h2"]
    assert "ranks 2, 3" in w.node_lost(ASSIGNMENT)["h2"]


@pytest.mark.parametrize("events", [
    # a guard of h2 said bye: its rank ended on its own (a script error), no node kill
    [(0, "h1", 5.0, None), (1, "h1", 5.0, None), (2, "h2", 1.0, 1), (3, "h2", 1.0, None)],
    # closed in the same round of the service as a guard of h1: no order to tell by
    [(0, "h1", 1.0, None), (1, "h1", 5.0, None), (2, "h2", 1.0, None), (3, "h2", 1.0, None)],
    # every host at once: the job as a whole was killed
    [(0, "h1", 1.0, None), (1, "h1", 1.0, None), (2, "h2", 1.0, None), (3, "h2", 1.0, None)],
    # one guard of h2 never said hello
    [(0, "h1", 5.0, None), (1, "h1", 5.0, None), (2, "h2", 1.0, None)],
])
def test_no_host_stands_out(events):
    assert watch_with(events).node_lost(ASSIGNMENT) == {}


def test_guard_lines_reach_the_watch_and_a_notice_is_answered():
    left = []
    watch = GuardWatch(on_leaving=lambda host, rank: left.append((host, rank)))
    with HostService("127.0.0.1", SECRET, lambda: 0, watch=watch) as service:
        env = {"MXHOROVOD_ELASTIC": "1", "MXHOROVOD_ELASTIC_SECRET": SECRET,
               "MXHOROVOD_ELASTIC_DRIVER": "127.0.0.1:%d" % service.port}
        a, b = GuardLink(env, 2, "h2"), GuardLink(env, 3, "h2")
        assert a.leaving() is True and b.leaving() is True
        assert left == [("h2", 2)]  # one notice per host
        watch.stopping = True  # the launcher got SIGINT/SIGTERM: no host's notice
        assert a.leaving() is False
        assert a.send("bye", 0)
        a.close()
        b.sock.close()  # killed: no bye
        # A forged line (another secret) is ignored; the connection stays a guard's.
        nonce, hello = guard_hello("ef" * 32, 5, "h9")
        with socket.create_connection(("127.0.0.1", service.port)) as s:
            s.sendall(hello + guard_line("ef" * 32, nonce, "leaving"))
            s.settimeout(2)
            assert s.recv(100) == b""  # not a hello signed with the run's secret: closed
        end = time.monotonic() + 5
        while time.monotonic() < end and not all(g["closed"] for g in watch.guards.values()):
            time.sleep(0.02)
    guards = sorted(watch.guards.values(), key=lambda g: g["rank"])
    assert [(g["rank"], g["host"], g["bye"]) for g in guards] == [(2, "h2", 0), (3, "h2", None)]
    assert all(g["closed"] for g in guards)
    assert watch.leaving == {"h2": 2}


def test_no_driver_no_link():
    assert GuardLink({}, 0, "h1").sock is None
    env = {"MXHOROVOD_ELASTIC": "1", "MXHOROVOD_ELASTIC_SECRET": SECRET,
           "MXHOROVOD_ELASTIC_DRIVER": "127.0.0.1:1"}  # nothing listens: no error
    link = GuardLink(env, 0, "h1", timeout=1)
    assert link.sock is None and link.leaving() is False and link.send("bye", 0) is False
