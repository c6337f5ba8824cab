"""san-web's answers when something other than a JobService status goes wrong, its
limit flags, and its judgement of database errors; all in-process (ASGI)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy.exc as sa_exc

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.web import cli
from san_jobs.web._failures import is_database_unavailable
from san_jobs.web.app import create_app


class _BrokenJobs:
    """A JobService client that fails the way a bug does, with internals in its text."""

    def __init__(self, _address: str) -> None:
        pass

    async def get_job(self, job_id: str) -> pb.Job:
        raise RuntimeError("secret at /srv/san/internal.py: postgresql://svc:pw@db")

    async def close(self) -> None:
        pass


async def _call(
    tmp_path: Path, method: str, path: str, max_body_bytes: int = 64, **kwargs: object
) -> httpx.Response:
    application = create_app(
        job_service="127.0.0.1:1",
        database_url=f"sqlite+aiosqlite:///{tmp_path}/web.db",
        client_factory=_BrokenJobs,  # type: ignore[arg-type]
        max_body_bytes=max_body_bytes,
    )
    async with application.router.lifespan_context(application):
        # The app's own 500 answer is what is tested, not the re-raise for servers' logs.
        transport = httpx.ASGITransport(app=application, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://web") as http:
            return await http.request(method, path, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/no/such/page", 404, "NOT_FOUND"),
        ("PUT", "/api/scraps", 405, "METHOD_NOT_ALLOWED"),
        ("GET", "/api/scraps/not-a-uuid", 404, "NOT_FOUND"),
        ("GET", "/api/scraps/%00", 404, "NOT_FOUND"),
    ],
)
async def test_routing_errors_are_json(
    tmp_path: Path, method: str, path: str, status: int, code: str
) -> None:
    response = await _call(tmp_path, method, path)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


async def test_streamed_body_over_the_limit_is_json_413(tmp_path: Path) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 20  # no Content-Length: counted while it streams

    response = await _call(
        tmp_path,
        "POST",
        "/api/scraps",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json()["error"] == {
        "code": "REQUEST_TOO_LARGE",
        "message": "the body must be at most 64 bytes",
    }


async def test_deeply_nested_json_is_422(tmp_path: Path) -> None:
    response = await _call(
        tmp_path,
        "POST",
        "/api/scraps",
        max_body_bytes=1024 * 1024,
        content=b"[" * 500_000,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["error"]["fieldViolations"][0]["field"] == "body"


async def test_unexpected_error_is_500_with_an_id_and_no_internals(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="san_web"):
        response = await _call(tmp_path, "GET", "/api/async-jobs/j1")
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "INTERNAL"
    assert "secret" not in response.text and "postgresql" not in response.text
    incident = error["message"].removeprefix("internal error (id ").removesuffix(")")
    logged = [r for r in caplog.records if incident in r.getMessage()]
    assert logged and logged[0].exc_info is not None  # the details are in the log


class _Orig(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("error", "unavailable"),
    [
        (sa_exc.OperationalError("SELECT", {}, Exception("database is locked")), True),
        (sa_exc.InterfaceError("SELECT", {}, Exception("connection is closed")), True),
        (sa_exc.DBAPIError("SELECT", {}, _Orig("57P01")), True),  # admin shutdown
        (sa_exc.DBAPIError("SELECT", {}, _Orig("3D000")), True),  # database gone
        (sa_exc.DBAPIError("SELECT", {}, _Orig("22021")), False),  # bad data: a bug here
        (sa_exc.IntegrityError("INSERT", {}, Exception("duplicate key")), False),
        (ConnectionRefusedError(111, "refused"), True),
        (ValueError("bug"), False),
    ],
)
def test_database_errors_are_told_apart(error: BaseException, unavailable: bool) -> None:
    assert is_database_unavailable(error) is unavailable


def test_limit_flags_and_their_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = cli.build_parser().parse_args([])
    assert defaults.max_body_bytes == 1024 * 1024
    assert defaults.max_connections == 100
    assert defaults.header_timeout == 5.0 and defaults.body_timeout == 30.0
    monkeypatch.setenv("SAN_WEB_MAX_BODY_BYTES", "2048")
    monkeypatch.setenv("SAN_WEB_MAX_CONNECTIONS", "7")
    monkeypatch.setenv("SAN_WEB_HEADER_TIMEOUT", "2.5")
    monkeypatch.setenv("SAN_WEB_BODY_TIMEOUT", "9")
    from_env = cli.build_parser().parse_args([])
    assert (from_env.max_body_bytes, from_env.max_connections) == (2048, 7)
    assert (from_env.header_timeout, from_env.body_timeout) == (2.5, 9.0)
    assert cli.build_parser().parse_args(["--max-body-bytes", "10"]).max_body_bytes == 10


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-body-bytes", "0"],
        ["--max-body-bytes", "-1"],
        ["--max-connections", "lots"],
        ["--header-timeout", "0"],
        ["--header-timeout", "nan"],
        ["--body-timeout", "inf"],
    ],
)
def test_bad_limits_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(argv)
    assert exited.value.code == 2
