"""Issue 22, point 9: the /metrics listener is bounded like every other listener.

Real sockets on loopback: 500 half-sent requests do not start a thread each (at most
the connection cap), a client that sends slowly is cut off after the timeout, a
scrape still works after both, and each service refuses --metrics-listen 0.0.0.0 at
start (one line) unless --insecure.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter

from san_jobs.shared.metrics_http import MetricsListenError, MetricsServer
from tests.support.processes import BIN

CAP = 8
TIMEOUT = 1.0
HALF_SENT = 500


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    registry = CollectorRegistry()
    Counter("bounds_test", "a sample so the page is not empty", registry=registry).inc()
    metrics = MetricsServer("127.0.0.1:0", registry, max_connections=CAP, timeout=TIMEOUT)
    metrics.start()
    yield metrics
    metrics.stop()


def scrape(server: MetricsServer) -> str:
    with urllib.request.urlopen(server.url, timeout=10) as answer:  # our own loopback URL
        return str(answer.read().decode())


def test_half_sent_requests_do_not_grow_threads(server: MetricsServer) -> None:
    threads_before = threading.active_count()
    sockets: list[socket.socket] = []
    try:
        for _ in range(HALF_SENT):
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never the blank line
            sockets.append(conn)
        time.sleep(0.3)  # let the server accept what it will
        grown = threading.active_count() - threads_before
        assert grown <= CAP, f"{grown} threads for {HALF_SENT} half-sent requests"
    finally:
        for conn in sockets:
            conn.close()
    # The cut connections and the refused ones are gone; a scrape is served.
    deadline = time.monotonic() + 10
    while True:
        try:
            assert "bounds_test_total 1.0" in scrape(server)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_slow_client_is_cut_off(server: MetricsServer) -> None:
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    with conn:
        started = time.monotonic()
        conn.sendall(b"GET /metrics HTTP/1.1\r\n")
        # A byte now and then: each read is quick, the whole request never ends.
        with pytest.raises(OSError):
            for _ in range(40):
                time.sleep(0.2)
                conn.sendall(b"X")
                if time.monotonic() - started > 6:
                    break
            # Closed by the server: the next read is EOF (or a reset).
            if conn.recv(1024) == b"":
                raise ConnectionResetError("closed")
        assert time.monotonic() - started < 6, "the slow client was never cut off"


def test_beyond_loopback_needs_insecure() -> None:
    registry = CollectorRegistry()
    with pytest.raises(MetricsListenError, match=r"refusing to serve metrics on 0\.0\.0\.0:0"):
        MetricsServer("0.0.0.0:0", registry).start()  # refused: the point
    allowed = MetricsServer("0.0.0.0:0", registry, insecure=True)
    allowed.start()
    allowed.stop()


@pytest.mark.parametrize("program", ["job-service", "ai-gateway"])
def test_services_refuse_metrics_beyond_loopback(program: str, tmp_path: Path) -> None:
    argv = [str(BIN / program), "--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0"]
    if program == "job-service":
        argv += ["--database-url", f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"]
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert refused.returncode != 0, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert "refusing to serve metrics on 0.0.0.0:0 (not a loopback address)" in last
    assert "--insecure" in last
    assert "Traceback" not in refused.stderr
