"""Idle connections against a real san-web process, over real sockets: one client
address holding many cannot take the server from the others, over HTTP or HTTPS, and
under HTTPS a socket that never starts its handshake is counted and cut off at
``--header-timeout``. The other client is real too: its sockets are bound to
127.0.0.2, which Linux routes to loopback like 127.0.0.1.

JobService is not needed (``/healthz`` is san-web's own), so san-web is pointed at a
port where nothing listens."""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _certs import write_test_certs
from conftest import start_web

from tests.support.processes import running

pytestmark = pytest.mark.acceptance

NOWHERE = "127.0.0.1:1"
ELSEWHERE = "127.0.0.2"
# How long a test waits for something that must happen before it calls it missing: a
# bound on a failure, not a measure of speed.
PATIENCE = 20.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_certs(tmp_path_factory.mktemp("certs"))


def _https_flags(certs: Path) -> list[str]:
    return ["--tls-cert", str(certs / "san-web.pem"), "--tls-key", str(certs / "san-web-key.pem")]


@contextlib.contextmanager
def _idle_sockets(address: str, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections from 127.0.0.1 that send nothing."""
    host, port = address.rsplit(":", 1)
    opened = [socket.create_connection((host, int(port))) for _ in range(count)]
    try:
        yield opened
    finally:
        for sock in opened:
            sock.close()


def _get(url: str, *, local_address: str | None = None, verify: object = True) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=local_address, verify=verify)  # type: ignore[arg-type]
    with httpx.Client(transport=transport, timeout=PATIENCE) as client:
        return client.get(url)


def _served_eventually(url: str, *, verify: object = True) -> None:
    deadline = time.monotonic() + PATIENCE
    while True:
        with contextlib.suppress(httpx.TransportError):
            if _get(url, verify=verify).status_code == 200:
                return
        assert time.monotonic() < deadline, f"{url} not served again within {PATIENCE}s"
        time.sleep(0.1)


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server ends this (silent) connection within PATIENCE."""
    sock.settimeout(PATIENCE)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_idle_connections_from_one_address_leave_the_others_served(tmp_path: Path) -> None:
    # The defaults (100 in all, 20 per address), and idle sockets that stay a minute.
    with running(start_web(tmp_path, NOWHERE, "--header-timeout", "60")) as web:
        url = f"http://{web.address}/healthz"
        with _idle_sockets(web.address, 100):
            other = _get(url, local_address=ELSEWHERE)
            assert other.status_code == 200, other.text
            same = _get(url)
            assert same.status_code == 503
            assert same.json()["error"]["code"] == "UNAVAILABLE"
            assert "from your address" in same.json()["error"]["message"]
            assert int(same.headers["retry-after"]) >= 1
        _served_eventually(url)


def test_silent_https_sockets_count_toward_the_cap(tmp_path: Path, certs: Path) -> None:
    flags = [*_https_flags(certs), "--max-connections", "3", "--header-timeout", "60"]
    with running(start_web(tmp_path, NOWHERE, *flags)) as web:
        url = f"https://{web.address}/healthz"
        verify = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        # Three handshakes never started fill the cap: a fourth connection, from
        # another address too, is closed (nothing can be said before TLS).
        with _idle_sockets(web.address, 3), pytest.raises(httpx.TransportError):
            _get(url, local_address=ELSEWHERE, verify=verify)
        _served_eventually(url, verify=verify)


def test_a_silent_https_socket_is_cut_off_at_the_header_timeout(
    tmp_path: Path, certs: Path
) -> None:
    flags = [*_https_flags(certs), "--header-timeout", "1"]
    with running(start_web(tmp_path, NOWHERE, *flags)) as web:
        with _idle_sockets(web.address, 3) as silent:
            # The handshake is bounded by --header-timeout (asyncio's own bound is 60 s).
            assert all(_closed_by_server(sock) for sock in silent)
        verify = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        assert _get(f"https://{web.address}/healthz", verify=verify).status_code == 200


def test_over_https_one_address_over_its_cap_leaves_the_others_served(
    tmp_path: Path, certs: Path
) -> None:
    flags = [*_https_flags(certs), "--max-connections-per-address", "3"]
    flags += ["--header-timeout", "60"]
    with running(start_web(tmp_path, NOWHERE, *flags)) as web:
        url = f"https://{web.address}/healthz"
        verify = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        with _idle_sockets(web.address, 3):
            assert _get(url, local_address=ELSEWHERE, verify=verify).status_code == 200
            with pytest.raises(httpx.TransportError):
                _get(url, verify=verify)
        _served_eventually(url, verify=verify)


def test_https_answers_carry_hsts_and_plain_http_does_not(tmp_path: Path, certs: Path) -> None:
    verify = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    with running(start_web(tmp_path, NOWHERE, *_https_flags(certs))) as web:
        secure = _get(f"https://{web.address}/healthz", verify=verify)
        assert secure.headers["strict-transport-security"] == "max-age=31536000"
        # Not for localhost: it would pin every port of the machine's localhost to HTTPS.
        port = web.address.rsplit(":", 1)[1]
        with httpx.Client(verify=verify) as client:
            local = client.get(
                f"https://{web.address}/healthz", headers={"host": f"localhost:{port}"}
            )
        assert local.status_code == 200 and "strict-transport-security" not in local.headers
    with running(start_web(tmp_path, NOWHERE)) as plain:
        assert "strict-transport-security" not in _get(f"http://{plain.address}/healthz").headers
