"""mxhorovod.common.launcher_connection: the word to Hydra's proxy that a multiprocessing child
finalized MPI (the end-to-end case is test_failures' fork_before_init child_first)."""
import socket

import pytest

from mxhorovod.common import launcher_connection


@pytest.fixture
def proxy(monkeypatch):
    """A socket pair: the process's end in PMI_FD, the proxy's end returned."""
    mine, theirs = socket.socketpair()
    monkeypatch.setenv("PMI_FD", str(mine.fileno()))
    for name in ("MPIR_CVAR_PMI_VERSION", "MPICH_PMI_VERSION", "MPIR_PARAM_PMI_VERSION"):
        monkeypatch.delenv(name, raising=False)
    yield theirs
    mine.close()
    theirs.close()


def test_acknowledged_finalize_returns_none(proxy):
    proxy.sendall(b"cmd=finalize_ack rc=0\n")  # queued before the request: read after it
    assert launcher_connection.finalize(limit_s=5) is None
    assert proxy.recv(100) == b"cmd=finalize\n"


def test_no_answer_is_reported_not_waited_for_forever(proxy):
    assert launcher_connection.finalize(limit_s=0.2) == "no answer in 0.2 s"


def test_closed_connection_and_odd_answer_are_reported(proxy):
    proxy.sendall(b"cmd=barrier_out\n")
    assert "unexpected answer" in launcher_connection.finalize(limit_s=5)
    proxy.shutdown(socket.SHUT_WR)
    assert launcher_connection.finalize(limit_s=5) == "the launcher closed the connection"


@pytest.mark.parametrize("env", [{"PMI_FD": ""}, {"PMI_FD": "x"}, {"MPIR_CVAR_PMI_VERSION": "2"},
                                 {"MPICH_PMI_VERSION": "x"}])
def test_other_launchers_and_pmi_versions_are_left_alone(proxy, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert launcher_connection.finalize(limit_s=0.2) is None
    proxy.setblocking(False)
    with pytest.raises(BlockingIOError):
        proxy.recv(100)  # nothing was written
