"""The elastic driver's host service (mxhorovodrun/elastic_service.py) and
its client (elastic_protocol.ask_hosts_version, runtime.hosts_updated): silent, slow,
unsigned and forged peers get nothing and delay nobody."""
import socket
import threading
import time

import pytest

from mxhorovodrun.elastic_service import HostService
from mxhorovodrun.elastic_protocol import (ENV_DRIVER, ENV_HOSTS_VERSION, ENV_SECRET, _mac,
                                           ask_hosts_version)

SECRET = "ab" * 32


@pytest.fixture
def service():
    version = [7]
    with HostService("127.0.0.1", SECRET, lambda: version[0], deadline=2.0) as s:
        s.set_version = lambda v: version.__setitem__(0, v)
        yield s


def closed_without_a_word(sock, within):
    """Whether the peer closed ``sock`` within ``within`` seconds, having sent nothing."""
    sock.settimeout(within)
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_silent_clients_do_not_delay_a_signed_ask(service):
    assert service.address == "127.0.0.1"  # every host of the job is this one
    silent = [socket.create_connection(("127.0.0.1", service.port)) for _ in range(50)]
    try:
        started = time.monotonic()
        assert ask_hosts_version("127.0.0.1:%d" % service.port, SECRET) == 7
        assert time.monotonic() - started < 0.3
        service.set_version(8)
        assert ask_hosts_version("127.0.0.1:%d" % service.port, SECRET) == 8
    finally:
        for s in silent:
            s.close()


@pytest.mark.parametrize("request_line", [
    b"hosts_version %s %s\n" % (b"0" * 32, _mac("another secret", b"hosts_version:" + b"0" * 32)),
    b"hosts_version\n",
    b"GET / HTTP/1.0\r\n\r\n",
    b"x" * 300,
], ids=["wrong signature", "old request", "garbage", "over-long line"])
def test_unsigned_requests_get_no_answer_and_are_closed(service, request_line):
    with socket.create_connection(("127.0.0.1", service.port)) as s:
        s.sendall(request_line)
        assert closed_without_a_word(s, within=1.0)  # at once, not at the 2 s deadline


def test_a_client_with_another_secret_is_refused(service):
    with pytest.raises(ConnectionError):
        ask_hosts_version("127.0.0.1:%d" % service.port, "another secret")


def test_silent_and_trickling_clients_are_closed_at_the_deadline_and_beyond_the_cap():
    with HostService("127.0.0.1", SECRET, lambda: 1, deadline=0.5,
                      max_connections=4) as service:
        conns = [socket.create_connection(("127.0.0.1", service.port)) for _ in range(6)]
        try:
            # The two oldest made room for the last two, at once.
            assert closed_without_a_word(conns[0], 0.2) and closed_without_a_word(conns[1], 0.2)
            trickle = conns[2]
            started = time.monotonic()
            with pytest.raises(OSError):
                for _ in range(20):
                    trickle.sendall(b"h")
                    time.sleep(0.1)
            assert time.monotonic() - started < 1.0
            assert all(closed_without_a_word(c, 0.2) for c in conns[3:])
            assert ask_hosts_version("127.0.0.1:%d" % service.port, SECRET) == 1
        finally:
            for c in conns:
                c.close()


def test_an_address_not_of_this_host_listens_on_every_interface():
    with HostService("192.0.2.1", SECRET, lambda: 0) as service:  # (TEST-NET-1)
        assert service.address == "0.0.0.0"
        assert ask_hosts_version("127.0.0.1:%d" % service.port, SECRET) == 0


def fake_driver(answer):
    """A one-connection server that reads a request line and sends ``answer(nonce)``."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = listener.accept()
        with conn, listener:
            nonce = conn.recv(256).split()[1]
            conn.sendall(answer(nonce))
    threading.Thread(target=serve, daemon=True).start()
    return "127.0.0.1:%d" % listener.getsockname()[1]


@pytest.mark.parametrize("answer", [
    lambda nonce: b"9 %s\n" % _mac("forger", b"version:9:" + nonce),
    lambda nonce: b"9 %s\n" % _mac(SECRET, b"version:9:" + b"1" * 32),  # another request's
    lambda nonce: b"9\n",
], ids=["another secret", "replayed", "unsigned"])
def test_the_client_rejects_a_forged_answer(answer):
    with pytest.raises(ValueError, match="not a version signed"):
        ask_hosts_version(fake_driver(answer), SECRET)


def test_a_rank_without_the_secret_sees_no_change_with_one_warning(service, monkeypatch,
                                                                    capsys):
    from mxhorovod.elastic import runtime
    monkeypatch.setitem(runtime._state, "warned", set())
    monkeypatch.setenv(ENV_DRIVER, "127.0.0.1:%d" % service.port)
    monkeypatch.setenv(ENV_HOSTS_VERSION, "3")  # the driver's is 7: a change
    monkeypatch.delenv(ENV_SECRET, raising=False)
    assert runtime.hosts_updated() is None and runtime.hosts_updated() is None
    assert capsys.readouterr().err.count("MXHOROVOD_ELASTIC_SECRET is not set") == 1
    monkeypatch.setenv(ENV_SECRET, SECRET)
    assert runtime.hosts_updated() == "added"
