"""Helpers for the gateway's gRPC tests: decoding rich errors, test backends, waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from san_jobs.ai_gateway.backends.instant import InstantBackend
from san_jobs.ai_gateway.models import AnalyzeInput, AnalyzeResult

# start_gateway(backend_impl=None, /, **settings) -> an async AiGatewayService stub
StartGateway = Callable[..., Awaitable[Any]]


@dataclass
class RichError:
    code: grpc.StatusCode
    message: str
    info: error_details_pb2.ErrorInfo
    retry: error_details_pb2.RetryInfo | None
    quota: error_details_pb2.QuotaFailure | None
    bad_request: error_details_pb2.BadRequest | None

    @property
    def retry_seconds(self) -> float:
        assert self.retry is not None
        return self.retry.retry_delay.seconds + self.retry.retry_delay.nanos / 1e9


def rich(err: grpc.aio.AioRpcError) -> RichError:
    """The google.rpc.Status details of a failed call."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None, f"no rich status on {err.code()}: {err.details()}"
    return rich_status(status)


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def rich_status(status: status_pb2.Status) -> RichError:
    """The details of a google.rpc.Status (as a StreamCalls result carries it)."""
    found: dict[str, object] = {}
    for detail in status.details:
        for name, cls in (
            ("info", error_details_pb2.ErrorInfo),
            ("retry", error_details_pb2.RetryInfo),
            ("quota", error_details_pb2.QuotaFailure),
            ("bad_request", error_details_pb2.BadRequest),
        ):
            if detail.Is(cls.DESCRIPTOR):
                msg = cls()
                detail.Unpack(msg)
                found[name] = msg
    assert "info" in found, "every gateway error carries an ErrorInfo"
    return RichError(
        code=_CODES[status.code],
        message=status.message,
        info=found["info"],  # type: ignore[arg-type]
        retry=found.get("retry"),  # type: ignore[arg-type]
        quota=found.get("quota"),  # type: ignore[arg-type]
        bad_request=found.get("bad_request"),  # type: ignore[arg-type]
    )


class CountingBackend(InstantBackend):
    """The instant backend, counting analyze calls, optionally slow, noting when a call
    arrives (`started`, for tests that act while one is in flight) and cancellation."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls = 0
        self.delay = delay
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def analyze(self, request: AnalyzeInput, time_left: float | None) -> AnalyzeResult:
        self.calls += 1
        self.started.set()
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return await super().analyze(request, time_left)


class SlowTextBackend(InstantBackend):
    """The instant backend, except that an analyze call whose text starts with "slow"
    sleeps ``delay`` seconds first. Notes, by text, which calls started and which were
    cancelled while sleeping (their backend work stopped)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.started: list[str] = []
        self.cancelled: list[str] = []

    async def analyze(self, request: AnalyzeInput, time_left: float | None) -> AnalyzeResult:
        self.started.append(request.text)
        if request.text.startswith("slow"):
            try:
                await asyncio.sleep(self.delay)
            except asyncio.CancelledError:
                self.cancelled.append(request.text)
                raise
        return await super().analyze(request, time_left)


async def wait_until(condition: Callable[[], bool], what: str, limit: float = 5.0) -> None:
    """Poll ``condition`` until true (a bound for a hung test, not a timing assertion)."""
    for _ in range(int(limit / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"still waiting for {what}")


async def wait_for_lines(path: Path, n: int) -> list[str]:
    """The lines of ``path`` once it has at least ``n`` (the call log is written per call)."""
    lines: list[str] = []

    def enough() -> bool:
        nonlocal lines
        lines = path.read_text().splitlines() if path.exists() else []
        return len(lines) >= n

    await wait_until(enough, f"{n} lines in {path}")
    return lines


def write_caller_tokens(path: Path, **tokens: str) -> Path:
    """A --caller-tokens-file at ``path`` listing ``NAME=TOKEN`` pairs; returns ``path``."""
    lines = ["# callers of the AI gateway: NAME TOKEN", ""]
    lines += [f"{name} {token}" for name, token in tokens.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def bearer(token: str, *more: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying ``token`` as a bearer token (and ``more`` pairs)."""
    return (("authorization", f"Bearer {token}"), *more)
