"""What one careless or hostile HTTP client can make san-web do, over real sockets to a
real san-web process: bounded bodies (413), JSON-only writes (415), a deadline on the
request head and body (408), a connection cap (503), and 503s without internals."""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import Stack, _stop, start_web

from tests.support.databases import (
    create_temp_postgres_database,
    drop_database,
    drop_database_now,
    require_postgres,
)
from tests.support.processes import RunningService

pytestmark = pytest.mark.acceptance

MiB = 1024 * 1024
TEXT = "Uvicorn runs ASGI applications. Starlette serves them."
# How long a test waits for something that must happen before it calls it missing: a
# bound on a failure, not a measure of speed.
PATIENCE = 20.0


@pytest.fixture(scope="module")
def web_capped(ok_stack: Stack) -> Iterator[RunningService]:
    """At most 4 connections, default body limit (1 MiB), a patient head deadline."""
    web = start_web(
        ok_stack.log_dir, ok_stack.address, "--max-connections", "4", "--header-timeout", "60"
    )
    yield web
    _stop(web)


@pytest.fixture(scope="module")
def web_impatient(ok_stack: Stack) -> Iterator[RunningService]:
    """One second to send a request head, one more for its body."""
    web = start_web(
        ok_stack.log_dir, ok_stack.address, "--header-timeout", "1", "--body-timeout", "1"
    )
    yield web
    _stop(web)


def _url(web: RunningService) -> str:
    return f"http://{web.address}"


def _peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set (VmHWM): a spike shows even after it is freed."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text[:300]
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == code
    message: str = error["message"]
    return message


def test_big_body_is_413_and_memory_stays_low(web_capped: RunningService) -> None:
    url = f"{_url(web_capped)}/api/scraps"
    headers = {"content-type": "application/json"}
    peak_before = _peak_rss_bytes(web_capped.proc.pid)
    forty_mb = b'{"text": "' + b"x" * (40 * MiB) + b'"}'

    declared = httpx.post(url, content=forty_mb, headers=headers, timeout=60)
    assert "1048576 bytes" in _error(declared, 413, "REQUEST_TOO_LARGE")

    def chunks() -> Iterator[bytes]:  # no Content-Length: read as a stream, cut at 1 MiB
        for start in range(0, len(forty_mb), MiB):
            yield forty_mb[start : start + MiB]

    streamed = httpx.post(url, content=chunks(), headers=headers, timeout=60)
    _error(streamed, 413, "REQUEST_TOO_LARGE")

    growth = _peak_rss_bytes(web_capped.proc.pid) - peak_before
    print(f"san-web peak RSS grew by {growth / MiB:.1f} MiB for two 40 MB bodies")
    assert growth < 16 * MiB
    # Just under the limit is not refused for its size: it is saved (JobService judges
    # the text when the outbox hands it over).
    fits = httpx.post(url, json={"text": "x" * (MiB - 100)}, timeout=30)
    assert fits.status_code == 202 and fits.json()["scrapId"]


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", json.dumps({"text": TEXT})),
        ("application/x-www-form-urlencoded", "text=hello"),
        ("multipart/form-data; boundary=x", "--x--"),
        (None, json.dumps({"text": TEXT})),
    ],
)
def test_writes_must_be_json(
    web_capped: RunningService, content_type: str | None, body: str
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    response = httpx.post(f"{_url(web_capped)}/api/scraps", content=body, headers=headers)
    assert "application/json" in _error(response, 415, "UNSUPPORTED_MEDIA_TYPE")


def test_json_with_a_charset_is_accepted(web_capped: RunningService) -> None:
    response = httpx.post(
        f"{_url(web_capped)}/api/scraps",
        content=json.dumps({"text": TEXT}),
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 202


def _read_until_closed(sock: socket.socket, trickle: bytes) -> bytes:
    """Send ``trickle`` every 0.2 s until the server answers and closes (or PATIENCE).

    A server that closes while trickled bytes are still unread makes the kernel reset
    the connection, which may drop its answer on the way: then only the cut-off itself
    is seen, and ``b""`` is returned."""
    sock.settimeout(0.2)
    received = b""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            with contextlib.suppress(OSError):  # closed on us: read what it said
                sock.sendall(trickle)
            continue
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"still open after {PATIENCE}s; got {received[:200]!r}")


def _json_body(answer: bytes) -> dict[str, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    error: dict[str, str] = json.loads(body)["error"]
    return error


def test_a_slow_request_head_is_cut_off(web_impatient: RunningService) -> None:
    host, port = web_impatient.address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        answer = _read_until_closed(sock, b"X-Slow: 1\r\n")
    if answer:  # else reset: cut off all the same
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert _json_body(answer)["code"] == "REQUEST_TIMEOUT"
    # A client that is not slow is served as before.
    assert httpx.get(f"{_url(web_impatient)}/healthz").status_code == 200


def test_a_slow_request_body_is_cut_off(web_impatient: RunningService) -> None:
    host, port = web_impatient.address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /api/scraps HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        answer = _read_until_closed(sock, b" ")
    if answer:  # else reset: cut off all the same
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert _json_body(answer)["code"] == "REQUEST_TIMEOUT"


def test_connections_over_the_cap_get_503(web_capped: RunningService) -> None:
    host, port = web_capped.address.rsplit(":", 1)
    holders = [socket.create_connection((host, int(port))) for _ in range(4)]
    try:
        for holder in holders:  # half-sent requests, as a slow client leaves them
            holder.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        refused = httpx.get(f"{_url(web_capped)}/healthz")
        assert "too many open connections" in _error(refused, 503, "UNAVAILABLE")
    finally:
        for holder in holders:
            holder.close()
    deadline = time.monotonic() + PATIENCE
    while httpx.get(f"{_url(web_capped)}/healthz").status_code != 200:
        assert time.monotonic() < deadline, "the cap was not released"
        time.sleep(0.1)


def test_job_service_down_is_503_without_internals(web_down: str) -> None:
    # A new scrap is saved and queued (202); "analyze again" asks JobService directly.
    scrap_id = httpx.post(f"{web_down}/api/scraps", json={"text": TEXT}).json()["scrapId"]
    created = httpx.post(f"{web_down}/api/scraps/{scrap_id}/analyze")
    message = _error(created, 503, "UNAVAILABLE")
    assert message == "JobService is unavailable; try again later"
    port = web_down.rsplit(":", 1)[1]
    # The JobService address san-web could not reach is not the caller's business.
    assert "Connection refused" not in created.text and "ipv4" not in created.text
    got = httpx.get(f"{web_down}/api/async-jobs/00000000-0000-4000-8000-000000000000")
    assert _error(got, 503, "UNAVAILABLE") == message
    assert port not in message


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def scraps_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """san-web's own database: a SQLite file, or a throwaway PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'scraps.db'}"
        return
    reason = require_postgres()
    if reason is not None:
        pytest.skip(reason)
    url = create_temp_postgres_database(migrated=False)
    yield url
    drop_database(url)


def test_own_database_down_is_503_without_internals(
    ok_stack: Stack, scraps_database: str, tmp_path: Path
) -> None:
    web = start_web(tmp_path, ok_stack.address, database_url=scraps_database)
    try:
        base = _url(web)
        assert httpx.post(f"{base}/api/scraps", json={"text": TEXT}).status_code == 202
        if scraps_database.startswith("sqlite"):
            # Another process holds the file locked: writes wait, then give up.
            locker = sqlite3.connect(scraps_database.split("///", 1)[1], isolation_level=None)
            locker.execute("BEGIN EXCLUSIVE")
            answer = httpx.post(f"{base}/api/scraps", json={"text": TEXT}, timeout=60)
            locker.execute("ROLLBACK")
            locker.close()
        else:
            drop_database_now(scraps_database)  # FORCE: its sessions end too
            answer = httpx.post(f"{base}/api/scraps", json={"text": TEXT}, timeout=60)
        message = _error(answer, 503, "UNAVAILABLE")
        assert message == "san-web's database is unavailable; try again later"
        assert "locked" not in answer.text and "san_test_" not in answer.text
        assert "database is unavailable" in web.log()  # the details are in the log
    finally:
        _stop(web)


def _jobs_mentioning(stack: Stack, marker: str) -> int:
    with sqlite3.connect(stack.log_dir / "jobs.db") as jobs:
        count: int = jobs.execute(
            "SELECT count(*) FROM async_jobs WHERE request_params LIKE ?", (f"%{marker}%",)
        ).fetchone()[0]
    return count


@pytest.mark.parametrize(
    "raw_body",
    [
        json.dumps({"text": "unstorable before\x00after"}),
        '{"text": "unstorable lone \\ud800 surrogate"}',
        json.dumps({"text": f"unstorable {TEXT}", "title": "nul\x00title"}),
    ],
)
def test_unstorable_text_is_422_and_never_reaches_job_service(
    web_ok: str, ok_stack: Stack, raw_body: str
) -> None:
    response = httpx.post(
        f"{web_ok}/api/scraps", content=raw_body, headers={"content-type": "application/json"}
    )
    _error(response, 422, "INVALID_ARGUMENT")
    fields = [v["field"] for v in response.json()["error"]["fieldViolations"]]
    assert fields == ["title" if "title" in raw_body else "text"]
    # Scraps reach JobService through san-web's outbox, in order and after the answer:
    # once a scrap saved after the refused one is there, the refused one would be too.
    # (Counting all jobs raced the outbox handing over an earlier test's scrap.)
    marker = f"after-refusal-{time.monotonic_ns()}"
    saved = httpx.post(f"{web_ok}/api/scraps", json={"text": f"{marker} {TEXT}"}, timeout=60)
    assert saved.status_code == 202, saved.text[:300]
    deadline = time.monotonic() + PATIENCE
    while _jobs_mentioning(ok_stack, marker) == 0:
        assert time.monotonic() < deadline, "the later scrap never reached JobService"
        time.sleep(0.05)
    assert _jobs_mentioning(ok_stack, "unstorable") == 0
