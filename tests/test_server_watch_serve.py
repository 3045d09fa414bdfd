"""``watch --serve [HOST:]PORT``: the address, the one line when the gauges leave this machine,
only ``/metrics`` served, and bounded request handling — a client that sends its request a byte
at a time and a flood of connections are cut off or refused while the watch loop keeps its
cadence and other scrapes are answered. Every server here listens on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from hostgap.errors import HostgapError
from hostgap.server.metrics import parse
from hostgap.server.watch import listener as lst
from hostgap.server.watch import loop as w
from hostgap.server.watch.exporter import EXPORTED, Exporter, engine_labels
from metrics_standin import MetricsStandIn
from test_server_watch import texts


def test_addresses():
    assert lst.parse_address("9400") == lst.Address("127.0.0.1", 9400)
    assert lst.parse_address(9400) == lst.Address("127.0.0.1", 9400)
    assert lst.parse_address("0.0.0.0:9400") == lst.Address("0.0.0.0", 9400)
    assert lst.parse_address("[::]:0") == lst.Address("::", 0)
    assert lst.parse_address("gpu-host:9400").host == "gpu-host"
    for bad in ("", "x", "host:", "host:99999", "1:2:3", "[::1]9400", "[::1"):
        with pytest.raises(HostgapError, match="--serve"):
            lst.parse_address(bad)


def test_one_line_only_when_the_gauges_leave_this_machine():
    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1"):
        assert lst.exposure_note(lst.Address(host, 1), 1) is None
    wide = lst.exposure_note(lst.Address("0.0.0.0", 9400), 9400)
    assert wide.startswith(
        "the gauges on http://0.0.0.0:9400/metrics are readable from every network this machine is on"
    )
    one = lst.exposure_note(lst.Address("10.1.2.3", 9400), 9400)
    assert "from every network that reaches 10.1.2.3" in one
    assert "[::]:9400" in lst.exposure_note(lst.Address("::", 9400), 9400)


def get(port: int, path: str, method: str = "GET") -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_serves_metrics_and_nothing_else():
    li = lst.Listener(lst.Address("127.0.0.1", 0))
    try:
        li.publish(b"hostgap_x 1.0\n")
        assert get(li.port, "/metrics") == (200, b"hostgap_x 1.0\n")
        assert get(li.port, "/metrics?name[]=x")[0] == 200
        assert get(li.port, "/")[0] == 404 and get(li.port, "/metrics/")[0] == 404
        assert get(li.port, "/favicon.ico")[0] == 404
        assert get(li.port, "/metrics", "POST")[0] == 405
        assert get(li.port, "/metrics", "HEAD") == (200, b"")
        with socket.create_connection(("127.0.0.1", li.port), timeout=5) as s:
            s.sendall(b"NONSENSE\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 400")
        with socket.create_connection(("127.0.0.1", li.port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * (lst.MAX_HEAD_BYTES + 10))
            assert s.recv(100).startswith(b"HTTP/1.1 431")
    finally:
        li.close()


def test_a_port_in_use_is_bad_input():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(HostgapError, match="cannot listen on 127.0.0.1"):
            lst.Listener(lst.Address("127.0.0.1", s.getsockname()[1]))


def test_deadline_cuts_a_slow_client():
    now = [0.0]
    li = lst.Listener(lst.Address("127.0.0.1", 0), clock=lambda: now[0])
    try:
        s = socket.create_connection(("127.0.0.1", li.port), timeout=5)
        s.sendall(b"GE")
        time.sleep(0.5)
        now[0] = lst.REQUEST_DEADLINE_S + 1  # the whole exchange's deadline passed
        assert s.recv(10) == b""  # closed, without an answer
        assert li.stats["timed_out"] == 1
        s.close()
    finally:
        li.close()


class Slowpoke(threading.Thread):
    """A client that sends a request head one byte every ``every_s`` seconds."""

    def __init__(self, port: int, every_s: float, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.every_s, self.stop = port, every_s, stop
        self.cut = False

    def run(self) -> None:
        head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 200 + b"\r\n\r\n"
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
                for b in head:
                    if self.stop.wait(self.every_s):
                        return
                    s.sendall(bytes([b]))
        except OSError:
            self.cut = True


class Flood(threading.Thread):
    """Opens connections as fast as it can and leaves them open, silent."""

    def __init__(self, port: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.stop = port, stop
        self.opened = 0
        self.socks: list[socket.socket] = []

    def run(self) -> None:
        while not self.stop.is_set() and self.opened < 500:
            try:
                self.socks.append(socket.create_connection(("127.0.0.1", self.port), timeout=2))
                self.opened += 1
            except OSError:
                time.sleep(0.01)
        for s in self.socks:
            s.close()


def test_slow_clients_and_a_flood_never_stall_the_loop():
    """The loop's intervals come on time while 8 clients send a byte a second and another opens
    hundreds of silent connections; once the clients are gone a scrape is answered again."""
    t = texts(22)
    stop = threading.Event()
    with MetricsStandIn(t) as srv:
        first = w.first_scrape(w.WatchConfig(srv.url, interval_s=0.2))
        exp = Exporter(0, engine_labels(first))
        updates: list[float] = []
        try:
            clients = [Slowpoke(exp.port, 1.0, stop) for _ in range(8)]
            flood = Flood(exp.port, stop)
            for c in (*clients, flood):
                c.start()

            def on_row(row: dict) -> None:
                t0 = time.perf_counter()
                exp.update(row)
                updates.append(time.perf_counter() - t0)

            cfg = w.WatchConfig(srv.url, interval_s=0.2, max_intervals=20)
            rows = w.watch(cfg, on_row, lambda m: None, None, first)
            cut_by = time.monotonic() + lst.REQUEST_DEADLINE_S * 3
            while exp.listener.stats["timed_out"] == 0 and time.monotonic() < cut_by:
                time.sleep(0.1)
            stop.set()
            flood.join(30)
            answered = get(exp.port, "/metrics")[0]
        finally:
            stop.set()
            exp.close()
    assert len(rows) == 20 and all(r["status"] == "ok" for r in rows)
    assert max(updates) < 1.0  # publishing never waits on a client (microseconds when idle)
    ticks = [round(r["t_rel_s"] / 0.2) for r in rows]
    assert len(set(ticks)) == 20  # one row per tick, none merged
    assert ticks[-1] - ticks[0] <= 19 + 10  # at most a few ticks skipped on a loaded machine
    assert answered == 200
    stats = exp.listener.stats
    assert stats["refused"] > 0 or flood.opened < lst.MAX_CONNECTIONS  # beyond the bound: closed at once
    assert stats["timed_out"] >= 1  # the slow clients and the silent ones are cut at the deadline


def test_exported_names_are_what_a_scrape_shows():
    with MetricsStandIn(texts(3)) as srv:
        first = w.first_scrape(w.WatchConfig(srv.url, interval_s=0.2))
        exp = Exporter(0, engine_labels(first))
        try:
            rows = w.watch(w.WatchConfig(srv.url, interval_s=0.15, max_intervals=1), exp.update, lambda m: None)
            _, body = get(exp.port, "/metrics")
        finally:
            exp.close()
    counters, gauges, _ = parse(body.decode())
    names = set(counters) | set(gauges)
    assert names == set(EXPORTED), names ^ set(EXPORTED)
    (labels,) = gauges["hostgap_server_up"]
    assert gauges["hostgap_server_up"][labels] == 1.0
    assert gauges["hostgap_last_interval_timestamp_seconds"][labels] == pytest.approx(rows[0]["t_end"])


def test_the_api_serves_on_host_port():
    """``hostgap.watch(serve="127.0.0.1:0")`` mirrors ``--serve HOST:PORT``: the gauges are up
    while the watch runs, the address is said, and they are gone when it is closed."""
    import re

    import hostgap

    notes: list[str] = []
    with MetricsStandIn(texts(6)) as srv:
        with hostgap.watch(srv.url, interval=0.15, serve="127.0.0.1:0", store=False, on_note=notes.append) as wt:
            (said,) = [n for n in notes if n.startswith("serving hostgap gauges on ")]
            port = int(re.search(r":(\d+)/metrics$", said).group(1))
            rows = [r for _, r in zip(range(2), wt, strict=False)]
            status, body = get(port, "/metrics")
        assert status == 200 and b"hostgap_host_exposed_share{" in body
        assert not any("readable" in n for n in notes)  # loopback: no exposure line
        assert len(rows) == 2 and wt.summary["intervals"] == 2
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
