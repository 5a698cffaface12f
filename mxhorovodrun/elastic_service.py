"""The elastic driver's host service (one per job, a context manager): the TCP service
that answers rank 0's host-set question and holds the rank guards' connections
(elastic_protocol). Used by elastic_driver.py."""
import selectors
import socket
import threading
import time

from mxhorovodrun.elastic_protocol import (LINE_MAX_BYTES, answer_hosts_version, guard_answer,
                                           read_guard_hello, read_guard_line)

__all__ = ["HostService"]


class HostService:
    """The driver's host-set service for one job (a context manager): on a free TCP port of
    the address the ranks are told (all interfaces when that is not an address of this
    host), answers each request signed with ``secret`` with ``version()``, the current
    host-set version, and closes anything else without a word (elastic_protocol).

    One thread, one selector, nonblocking sockets: a connection has ``deadline`` seconds
    from its accept to send its request line (at most LINE_MAX_BYTES), and at most
    ``max_connections`` are open (the oldest is closed to make room), so clients that stay
    silent or trickle bytes cannot delay the ranks' requests.

    With ``watch`` (elastic_guards.GuardWatch), a connection whose first line is a rank
    guard's signed hello stays open, out of the deadline and the cap (at most
    ``max_guards``), and its lines and its end go to ``watch`` (elastic_protocol).

    Raises (at construction) OSError when it cannot listen.
    """

    def __init__(self, address, secret, version, deadline=2.0, max_connections=64,
                 watch=None, max_guards=65536):
        self.secret = secret
        self.version = version
        self.deadline = deadline
        self.max_connections = max_connections
        self.watch = watch
        self.max_guards = max_guards
        self.pending = {}  # connection -> [deadline (monotonic s), bytes read]; oldest first
        self.guards = {}   # a guard's connection -> [its nonce, bytes read]
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            try:
                self.listener.bind((address, 0))
            except OSError:  # not an address of this host (NAT, a name that did not resolve)
                self.listener.bind(("0.0.0.0", 0))
            self.listener.listen(128)
            self.listener.setblocking(False)
        except OSError:
            self.listener.close()
            raise
        self.address, self.port = self.listener.getsockname()
        self._wake, self._waker = socket.socketpair()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(self._wake, selectors.EVENT_READ)
        self.thread = threading.Thread(target=self._loop, daemon=True,
                                       name="mxhorovodrun-elastic-hosts")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Stops the thread and closes every socket."""
        if self.thread.ident is None:  # never started
            self._close_all()
            return
        try:
            self._waker.send(b"x")
        except OSError:  # the loop has ended already
            pass
        self.thread.join()

    def _loop(self):
        try:
            while True:
                timeout = None
                if self.pending:
                    first = next(iter(self.pending.values()))[0]
                    timeout = max(0.0, first - time.monotonic())
                ready = self.selector.select(timeout)
                now = time.monotonic()  # one time per round (GuardWatch.on_close)
                for key, _ in ready:
                    if key.fileobj is self._wake:
                        return
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fileobj in self.pending:  # (not closed earlier in this round)
                        self._read(key.fileobj)
                    elif key.fileobj in self.guards:
                        self._read_guard(key.fileobj, now)
                for conn, (deadline, _) in list(self.pending.items()):
                    if deadline > now:
                        break
                    self._drop(conn)
        finally:
            self._close_all()

    def _accept(self):
        try:
            conn, _ = self.listener.accept()
        except OSError:  # gone before the accept, or no file descriptor left
            return
        conn.setblocking(False)
        if len(self.pending) >= self.max_connections:
            self._drop(next(iter(self.pending)))
        self.pending[conn] = [time.monotonic() + self.deadline, b""]
        self.selector.register(conn, selectors.EVENT_READ)
        self._read(conn)  # a rank's request has usually arrived with the connection

    def _read(self, conn):
        entry = self.pending[conn]
        try:
            data = conn.recv(LINE_MAX_BYTES - len(entry[1]))
        except BlockingIOError:
            return
        except OSError:
            data = b""
        entry[1] += data
        if data and b"\n" not in entry[1] and len(entry[1]) < LINE_MAX_BYTES:
            return
        first, newline, rest = entry[1].partition(b"\n")
        hello = read_guard_hello(self.secret, first + newline) \
            if data and self.watch is not None and len(self.guards) < self.max_guards else None
        if hello:
            del self.pending[conn]
            self.guards[conn] = [hello[0], rest]  # (its next lines may have come with it)
            self.watch.on_hello(conn, hello[1], hello[2])
            self._guard_lines(conn)
            return
        answer = answer_hosts_version(self.secret, entry[1], self.version()) if data else None
        if answer:
            try:
                conn.send(answer)  # (a few dozen bytes: a new connection's buffer takes them)
            except OSError:
                pass
        self._drop(conn)

    def _read_guard(self, conn, now):
        entry = self.guards[conn]
        try:
            data = conn.recv(4096)
        except BlockingIOError:
            return
        except OSError:  # reset: the guard's process is gone
            data = b""
        if not data:
            self._drop(conn)
            self.watch.on_close(conn, now)
            return
        entry[1] += data
        self._guard_lines(conn)

    def _guard_lines(self, conn):
        entry = self.guards[conn]
        *lines, entry[1] = entry[1].split(b"\n")
        for line in lines:
            event = read_guard_line(self.secret, entry[0], line + b"\n")
            word = self.watch.on_line(conn, *event) if event else None
            if word:
                try:
                    conn.send(guard_answer(self.secret, entry[0], word))  # (a few bytes)
                except OSError:
                    pass
        if len(entry[1]) > LINE_MAX_BYTES:  # no line of the protocol is that long
            self._drop(conn)

    def _drop(self, conn):
        self.selector.unregister(conn)
        self.pending.pop(conn, None)
        self.guards.pop(conn, None)
        conn.close()

    def _close_all(self):
        for conn in list(self.pending) + list(self.guards):
            self._drop(conn)
        self.selector.close()
        for sock in (self.listener, self._wake, self._waker):
            sock.close()
