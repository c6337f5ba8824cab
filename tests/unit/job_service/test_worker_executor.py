"""The worker's executor on its own: a claim and a scripted gateway in, an Outcome
out, with no job store at all (the dispatch breaker gets a store of pauses only). On a
virtual-time loop (tests/support/virtual_time.py)."""

from __future__ import annotations

import ast
import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from san_jobs.job_service import worker as worker_package
from san_jobs.job_service.dispatch_breaker import DispatchBreaker
from san_jobs.job_service.domain.failures import GatewayCallError
from san_jobs.job_service.domain.model import AttemptUsage, GatewayAnswer, Job, JobType
from san_jobs.job_service.worker import WorkerConfig
from san_jobs.job_service.worker.executor import Executor
from san_jobs.job_service.worker.outcome import (
    Completed,
    Failed,
    GivenBack,
    PausedWhileWaiting,
    Retrying,
)
from tests.support.virtual_time import on_virtual_time, running_loop
from tests.unit.job_service._worker_parts import RESULT, PausesOnly, a_breaker, a_claim

UNAVAILABLE = GatewayCallError("UNAVAILABLE", "", "connection refused")
TIMED_OUT = GatewayCallError("DEADLINE_EXCEEDED", "", "no answer within 45s")
TOO_LONG = GatewayCallError("INVALID_ARGUMENT", "TOKEN_LIMIT_EXCEEDED", "9001 > 8192 tokens")


class Gateway:
    """The AiGateway port answering as `script(job)` says; with `hold`, each call
    waits for it first."""

    def __init__(self, script: Callable[[Job], GatewayAnswer | Exception]) -> None:
        self.script = script
        self.calls: list[tuple[str, float]] = []  # (job id, deadline)
        self.hold: asyncio.Event | None = None
        self.called = asyncio.Event()

    async def run(self, job: Job, deadline: float) -> GatewayAnswer:
        self.calls.append((job.id, deadline))
        self.called.set()
        if self.hold is not None:
            await self.hold.wait()
        answer = self.script(job)
        if isinstance(answer, Exception):
            raise answer
        return answer


def executor(
    gateway: Gateway, breaker: DispatchBreaker | None = None, concurrency: int = 1
) -> Executor:
    config = WorkerConfig(concurrency=concurrency, deadlines={JobType.CARD_ANALYSIS: 12.5})
    return Executor(gateway, breaker or a_breaker(PausesOnly()), config)


@on_virtual_time
async def test_an_answer_is_completed_with_its_result_and_usage() -> None:
    usage = AttemptUsage("model-x", 12, 34, 0.5)
    answer = GatewayAnswer(RESULT, usage)
    gateway = Gateway(lambda _job: answer)
    claim = a_claim()

    outcome = await executor(gateway).run(claim)

    assert isinstance(outcome, Completed) and outcome.word == "completed"
    assert outcome.answer is answer and outcome.answer.usage == usage
    assert outcome.call_seconds >= 0
    assert gateway.calls == [(claim.job.id, 12.5)], "called once, with the type's deadline"


@pytest.mark.parametrize("error", [TIMED_OUT, UNAVAILABLE], ids=["timeout", "transport"])
@on_virtual_time
async def test_a_transient_error_is_retried_while_attempts_are_left(
    error: GatewayCallError,
) -> None:
    run = executor(Gateway(lambda _job: error)).run

    first = await run(a_claim(attempt=1, max_attempts=3))
    last = await run(a_claim(attempt=3, max_attempts=3))

    assert isinstance(first, Retrying) and first.word == "retrying"
    assert first.failure.code == error.code and first.failure.transient
    assert isinstance(last, Failed) and last.word == "failed"
    assert last.failure == first.failure


@on_virtual_time
async def test_a_permanent_error_fails_at_once() -> None:
    outcome = await executor(Gateway(lambda _job: TOO_LONG)).run(a_claim(max_attempts=5))

    assert isinstance(outcome, Failed)
    assert (outcome.failure.code, outcome.failure.reason) == (
        "INVALID_ARGUMENT",
        "TOKEN_LIMIT_EXCEEDED",
    )
    assert not outcome.failure.transient


@on_virtual_time
async def test_an_error_of_ours_fails_the_attempt_under_an_error_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="job_service.worker")
    bug = RuntimeError("/srv/secret/path.py broke")

    outcome = await executor(Gateway(lambda _job: bug)).run(a_claim())

    assert isinstance(outcome, Failed) and outcome.failure.code == "INTERNAL"
    assert "secret" not in outcome.failure.message
    (record,) = caplog.records
    error_id = outcome.failure.message.rsplit(" ", 1)[-1].rstrip(")")
    assert f"unexpected error (error id {error_id})" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[1] is bug


@on_virtual_time
async def test_a_failure_while_its_type_is_paused_is_given_back() -> None:
    pauses = PausesOnly()
    pauses.pause(JobType.CARD_ANALYSIS, until=running_loop().now() + timedelta(seconds=5))

    outcome = await executor(Gateway(lambda _job: UNAVAILABLE), a_breaker(pauses)).run(a_claim())

    assert isinstance(outcome, GivenBack) and outcome.word == "given_back"
    assert outcome.failure.code == "UNAVAILABLE"


@on_virtual_time
async def test_a_cancelled_call_raises_and_frees_its_slot() -> None:
    gateway = Gateway(lambda _job: GatewayAnswer(RESULT))
    gateway.hold = asyncio.Event()
    run = executor(gateway, concurrency=1).run
    stuck = asyncio.create_task(run(a_claim()))
    await gateway.called.wait()

    stuck.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stuck

    gateway.hold.set()
    async with asyncio.timeout(1):  # the one slot is free again: no wait for it
        outcome = await run(a_claim(job_id="00000000-0000-4000-8000-000000000002"))
    assert isinstance(outcome, Completed)


@pytest.mark.parametrize("probe", [False, True])
@on_virtual_time
async def test_a_job_waiting_for_a_slot_when_its_type_pauses_gets_no_call(probe: bool) -> None:
    """Claimed ahead (all slots busy), the type pauses before a slot frees: the job is
    given back without a call; a probe, claimed from the paused type on purpose, runs."""
    pauses = PausesOnly()
    gateway = Gateway(lambda _job: TOO_LONG)  # permanent: the breaker keeps the pause
    gateway.hold = asyncio.Event()
    breaker = a_breaker(pauses)
    part = executor(gateway, breaker, concurrency=1)
    first = asyncio.create_task(part.run(a_claim()))
    await gateway.called.wait()
    waiting = a_claim(job_id="00000000-0000-4000-8000-000000000002")
    ahead = asyncio.create_task(part.run(waiting, probe=probe))
    await asyncio.sleep(0)
    assert part.waiting == {waiting.job.id}

    pauses.pause(JobType.CARD_ANALYSIS, until=running_loop().now() + timedelta(seconds=5))
    await breaker.refresh(force=True)  # as the producer does before each claim
    gateway.hold.set()
    assert isinstance(await first, Failed)
    outcome = await ahead

    assert part.waiting == set()
    if probe:
        assert isinstance(outcome, Failed) and len(gateway.calls) == 2
    else:
        assert isinstance(outcome, PausedWhileWaiting) and outcome.word == "given_back"
        assert [job_id for job_id, _ in gateway.calls] == [a_claim().job.id]


def test_the_executor_and_the_pool_never_call_the_store() -> None:
    """Store calls live in the producer, the completer and the rescuer only, so a change
    of the store port is made there (the executor has no store; the pool passes it on)."""
    package = Path(worker_package.__file__).parent
    for name in ("executor.py", "pool.py", "outcome.py", "config.py"):
        tree = ast.parse((package / name).read_text(encoding="utf-8"))
        calls_on_store = [
            ast.unparse(node.func)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and "store" in ast.unparse(node.func.value)
        ]
        assert calls_on_store == [], name
