"""The HTTP side of ``watch --serve``: a one-thread server that answers ``GET /metrics`` with
the last rendered exposition text and nothing else (any other path: 404).

Why not ``prometheus_client.start_http_server``: it starts a thread per connection and reads
each request without a deadline, so a client that sends a header byte per second holds a thread
for ever, and a flood of connections makes a flood of threads that compete with the watch loop
for the interpreter. Here one thread multiplexes every connection (``selectors``), each with a
deadline for the whole exchange (:data:`REQUEST_DEADLINE_S`, not per read), at most
:data:`MAX_CONNECTIONS` open at once (more are closed on accept), a request head of at most
:data:`MAX_HEAD_BYTES`; the body served is bytes the watch loop rendered beforehand
(:meth:`Listener.publish` swaps one reference), so serving never waits on the loop and the loop
never waits on a client.
"""

from __future__ import annotations

import contextlib
import ipaddress
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field

from hostgap.errors import HostgapError

REQUEST_DEADLINE_S = 5.0
"""Longest time from accepting a connection to having sent the whole answer."""
MAX_CONNECTIONS = 64
"""Connections served at once; further ones are closed as soon as they are accepted."""
MAX_HEAD_BYTES = 8192
"""Largest request head (request line and headers) read; a longer one is answered 431."""
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LOOPBACK_DEFAULT = "127.0.0.1"


@dataclass(frozen=True)
class Address:
    """Where ``--serve`` listens: ``host`` (default 127.0.0.1) and ``port`` (0: any free one)."""

    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port if port is None else port}/metrics"


def parse_address(value: str | int) -> Address:
    """``PORT``, ``HOST:PORT`` or ``[V6]:PORT`` (an int is a port on 127.0.0.1); HostgapError
    (exit 2) naming ``--serve`` when it is neither.

    >>> parse_address("9400"), parse_address("0.0.0.0:9400").host, parse_address("[::1]:9400").host
    (Address(host='127.0.0.1', port=9400), '0.0.0.0', '::1')
    """
    if isinstance(value, int):
        return Address(LOOPBACK_DEFAULT, _port(str(value)))
    text = str(value).strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise HostgapError("--serve", f"{value!r}: give [IPV6]:PORT")
        return Address(host, _port(rest[1:]))
    if ":" in text:
        host, _, port = text.rpartition(":")
        if not host or ":" in host:
            raise HostgapError("--serve", f"{value!r}: give PORT, HOST:PORT or [IPV6]:PORT")
        return Address(host, _port(port))
    return Address(LOOPBACK_DEFAULT, _port(text))


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise HostgapError("--serve", f"{text!r} is not a port (0-65535)")
    return int(text)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_note(address: Address, port: int) -> str | None:
    """The one line ``--serve`` prints when the gauges are readable beyond this machine."""
    if address.loopback:
        return None
    where = (
        "from every network this machine is on"
        if address.host in ("0.0.0.0", "::")
        else f"from every network that reaches {address.host}"
    )
    return f"the gauges on {address.url(port)} are readable {where} (no authentication: firewall the port)"


@dataclass
class _Conn:
    sock: socket.socket
    deadline: float
    head: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None


class Listener:
    """Serves :meth:`publish`-ed bytes on ``GET /metrics`` from one daemon thread until
    :meth:`close`. ``clock`` is for tests (a monotonic clock)."""

    def __init__(self, address: Address, clock=time.monotonic):
        self.address = address
        self.clock = clock
        self._body = b""
        self._stop = threading.Event()
        self.stats = {"served": 0, "not_found": 0, "timed_out": 0, "refused": 0, "bad": 0}
        family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
        try:
            infos = socket.getaddrinfo(address.host, address.port, family, socket.SOCK_STREAM)
            sock = socket.socket(family, socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise HostgapError("--serve", f"cannot listen on {address.host}:{address.port} ({exc})") from None
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(infos[0][4])
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise HostgapError(
                "--serve", f"cannot listen on {address.host}:{address.port} ({exc.strerror or exc})"
            ) from None
        self._sock = sock
        self._conns: dict[int, _Conn] = {}
        self._sel = selectors.DefaultSelector()
        self._sel.register(sock, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="hostgap-serve", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def publish(self, body: bytes) -> None:
        """The exposition text served from now on (one reference swapped: never blocks)."""
        self._body = body

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in list(self._conns.values()):
            self._drop(conn)
        with contextlib.suppress(OSError):
            self._sel.close()
        self._sock.close()

    # -- the thread -------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            for key, events in self._sel.select(timeout=0.2):
                if key.fileobj is self._sock:
                    self._accept()
                else:
                    conn = self._conns.get(key.fd)
                    if conn is not None:
                        self._serve(conn, events)
            self._expire()

    def _accept(self) -> None:
        for _ in range(MAX_CONNECTIONS):  # a bounded batch, so expiry runs under a flood too
            try:
                sock, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(self._conns) >= MAX_CONNECTIONS:
                self.stats["refused"] += 1
                with contextlib.suppress(OSError):
                    sock.close()
                continue
            sock.setblocking(False)
            conn = _Conn(sock, self.clock() + REQUEST_DEADLINE_S)
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ)

    def _serve(self, conn: _Conn, events: int) -> None:
        try:
            if conn.out is None and events & selectors.EVENT_READ:
                chunk = conn.sock.recv(4096)
                if not chunk:
                    self._drop(conn)
                    return
                conn.head += chunk
                self._answer_if_complete(conn)
            if conn.out is not None:
                sent = conn.sock.send(conn.out)
                conn.out = conn.out[sent:]
                if not len(conn.out):
                    self._drop(conn)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)

    def _answer_if_complete(self, conn: _Conn) -> None:
        end = conn.head.find(b"\r\n\r\n")
        if end < 0:
            end = conn.head.find(b"\n\n")
        if end < 0:
            if len(conn.head) > MAX_HEAD_BYTES:
                self.stats["bad"] += 1
                self._reply(conn, 431, b"request head too large\n")
            return
        line = bytes(conn.head[: conn.head.find(b"\n")]).decode("latin-1").strip()
        status, body = route(line, self._body)
        self.stats["served" if status == 200 else "not_found" if status == 404 else "bad"] += 1
        self._reply(conn, status, body, head_only=line.startswith("HEAD "))

    def _reply(self, conn: _Conn, status: int, body: bytes, head_only: bool = False) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 431: "Too Large"}
        ctype = CONTENT_TYPE if status == 200 else "text/plain; charset=utf-8"
        head = (
            f"HTTP/1.1 {status} {reason.get(status, '')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode("latin-1")
        conn.out = memoryview(head + (b"" if head_only else body))
        self._sel.modify(conn.sock, selectors.EVENT_WRITE)

    def _expire(self) -> None:
        now = self.clock()
        for conn in [c for c in self._conns.values() if c.deadline <= now]:
            self.stats["timed_out"] += 1
            self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        self._conns.pop(conn.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()


def route(request_line: str, body: bytes) -> tuple[int, bytes]:
    """(status, body) for a request line: ``GET``/``HEAD /metrics`` (a query string allowed)
    is the exposition; any other path 404; any other method 405.

    >>> route("GET /metrics HTTP/1.1", b"x 1\\n"), route("GET / HTTP/1.1", b"")[0], route("POST /metrics HTTP/1.1", b"")[0]
    ((200, b'x 1\\n'), 404, 405)
    """
    parts = request_line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return 400, b"bad request\n"
    method, target = parts[0], parts[1]
    if target.split("?", 1)[0] != "/metrics":
        return 404, b"not found: hostgap serves /metrics only\n"
    if method not in ("GET", "HEAD"):
        return 405, b"method not allowed\n"
    return 200, body
