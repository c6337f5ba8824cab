"""The worker's completer on its own: an Outcome and a claim in, the store written with
the claim's token, and the log, metrics and published jobs that say so; no gateway.
Over MemoryJobStore on a virtual-time loop (tests/support/virtual_time.py)."""

from __future__ import annotations

import asyncio
import logging
import random
from datetime import datetime, timedelta
from typing import Any

import pytest

from san_jobs.job_service.domain.backoff import BackoffPolicy
from san_jobs.job_service.domain.errors import StorageUnavailableError
from san_jobs.job_service.domain.model import (
    Claim,
    Failure,
    GatewayAnswer,
    Job,
    JobStatus,
)
from san_jobs.job_service.domain.ports import CompleteParams, FailParams, ReleaseParams
from san_jobs.job_service.metrics import (
    CANCELLED,
    COMPLETED,
    FAILED,
    GIVEN_BACK,
    RETRIED,
    SHUTDOWN_CODE,
)
from san_jobs.job_service.storage.memory import MemoryJobStore
from san_jobs.job_service.storage.memory_rows import MemoryTable
from san_jobs.job_service.storage.memory_worker import MemoryWorkerStore
from san_jobs.job_service.worker import CANCELLED_WHY, LEASE_LOST_WHY, PAUSED_CODE, WorkerConfig
from san_jobs.job_service.worker.completer import Completer
from san_jobs.job_service.worker.outcome import (
    Cancelled,
    Completed,
    Failed,
    GivenBack,
    LeaseLost,
    Outcome,
    PausedWhileWaiting,
    Retrying,
    ShutDown,
)
from tests.support.virtual_time import on_virtual_time, running_loop
from tests.unit.job_service._worker_parts import RESULT, Published, Recorded, claimed

UNAVAILABLE = Failure("UNAVAILABLE", "", "AI gateway unavailable: down", transient=True)
TOO_LONG = Failure("INVALID_ARGUMENT", "TOKEN_LIMIT_EXCEEDED", "too long", transient=False)


class BlippingStore(MemoryWorkerStore):
    """MemoryJobStore whose outcome writes fail while `down` (one down per call), or
    raise `refuse` (a value the database will not take); it records each write's
    parameters."""

    def __init__(self, table: MemoryTable) -> None:
        super().__init__(clock=running_loop().now, table=table)
        self.down: dict[str, int] = {}
        self.refuse: dict[str, Exception] = {}
        self.writes: list[tuple[str, Any]] = []

    def _outcome(self, method: str, params: object) -> None:
        self.writes.append((method, params))
        if method in self.refuse:
            raise self.refuse[method]
        if self.down.get(method, 0) > 0:
            self.down[method] -= 1
            raise StorageUnavailableError("connection refused")

    async def complete(self, params: CompleteParams) -> Job:
        self._outcome("complete", params)
        return await super().complete(params)

    async def fail(self, params: FailParams) -> Job:
        self._outcome("fail", params)
        return await super().fail(params)

    async def release(self, params: ReleaseParams) -> Job | None:
        self._outcome("release", params)
        return await super().release(params)


class Rig:
    def __init__(self, traced: bool = False) -> None:
        self.store = MemoryJobStore(clock=running_loop().now)
        self.store.worker = BlippingStore(self.store.table)
        self.published = Published()
        self.metrics = Recorded()
        self.not_renewed: list[str] = []
        self.retries: list[datetime] = []
        self.completer = Completer(
            self.store.worker,
            self.published,
            WorkerConfig(backoff=BackoffPolicy(base_delay=2.0, max_delay=300.0)),
            clock=running_loop().now,
            rng=random.Random(7),
            metrics=self.metrics,
            traced=traced,
            stop_renewing=self.not_renewed.append,
            retry_scheduled=self.retries.append,
        )

    async def write(self, outcome: Outcome, max_attempts: int = 3) -> tuple[Claim, Job]:
        claim = await claimed(self.store, max_attempts)
        await self.completer.write(claim, outcome)
        return claim, await self.store.queries.get(claim.job.id)


@on_virtual_time
async def test_completed_is_written_with_the_claim_token(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="job_service.worker")
    rig = Rig(traced=True)  # traced: the `completed` line at once, not in the next turn
    answer = GatewayAnswer(RESULT)

    claim, job = await rig.write(Completed(answer, call_seconds=0.25))

    ((method, params),) = rig.store.worker.writes
    assert method == "complete" and params.token == claim.token and params.result == RESULT
    assert job.status is JobStatus.COMPLETED and job.result == RESULT
    assert rig.not_renewed == [claim.job.id], "the lease let go before the write"
    assert rig.published.jobs == [job]
    assert rig.metrics.outcomes == [(COMPLETED, "")]
    assert f"job_id={job.id} completed: CARD_ANALYSIS attempt 1/3, gateway call 250 ms" in (
        caplog.messages
    )


@on_virtual_time
async def test_completed_lines_are_gathered_and_written_in_the_next_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="job_service.worker")
    """Untraced, one statement's many outcomes make one log write (log_each)."""
    rig = Rig()
    claim = await claimed(rig.store)
    await rig.completer.write(claim, Completed(GatewayAnswer(RESULT), call_seconds=0.1))
    assert not any("completed" in m for m in caplog.messages)

    await asyncio.sleep(0)
    assert [m for m in caplog.messages if "completed" in m] == [
        f"job_id={claim.job.id} completed: CARD_ANALYSIS attempt 1/3, gateway call 100 ms"
    ]


@on_virtual_time
async def test_a_write_is_retried_through_a_database_blip() -> None:
    rig = Rig()
    rig.store.worker.down["complete"] = 2
    started = running_loop().time()

    _, job = await rig.write(Completed(GatewayAnswer(RESULT), call_seconds=0.1))

    assert job.status is JobStatus.COMPLETED
    assert [method for method, _ in rig.store.worker.writes] == ["complete"] * 3
    assert running_loop().time() - started == pytest.approx(0.4 + 0.8), "backed off between"
    assert rig.metrics.outcomes == [(COMPLETED, "")]


@on_virtual_time
async def test_a_database_down_for_every_try_leaves_the_job_to_its_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig()
    rig.store.worker.down["complete"] = 99

    _, job = await rig.write(Completed(GatewayAnswer(RESULT), call_seconds=0.1))

    assert len(rig.store.worker.writes) == 5  # OUTCOME_WRITE_TRIES
    assert job.status is JobStatus.PROCESSING and rig.published.jobs == []
    assert any("outcome not written, database unavailable" in m for m in caplog.messages)


@on_virtual_time
async def test_a_lost_lease_is_logged_and_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig()
    claim = await claimed(rig.store)
    stale = Claim(claim.job, "a token another claim replaced")

    await rig.completer.write(stale, Completed(GatewayAnswer(RESULT), call_seconds=0.1))

    assert len(rig.store.worker.writes) == 1
    assert (await rig.store.queries.get(claim.job.id)).status is JobStatus.PROCESSING
    assert rig.metrics.lost == 1 and rig.metrics.outcomes == [] and rig.published.jobs == []
    assert (
        f"job_id={claim.job.id}: lease lost (cancelled or claimed again); outcome discarded"
        in caplog.messages
    )


@on_virtual_time
async def test_retrying_writes_the_backoff_time_and_says_when_it_is_due() -> None:
    rig = Rig()

    _, job = await rig.write(Retrying(UNAVAILABLE))

    assert job.status is JobStatus.PENDING and job.next_attempt_at is not None
    delay = job.next_attempt_at - running_loop().now()
    assert timedelta(seconds=1) <= delay <= timedelta(seconds=2)  # attempt 1: [base/2, base]
    assert rig.retries == [job.next_attempt_at] == rig.metrics.retries
    assert rig.metrics.outcomes == [(RETRIED, "UNAVAILABLE")]


@on_virtual_time
async def test_failed_is_final() -> None:
    rig = Rig()

    _, job = await rig.write(Failed(TOO_LONG))

    assert job.status is JobStatus.FAILED and job.error_code == "INVALID_ARGUMENT"
    assert rig.retries == [] and rig.metrics.outcomes == [(FAILED, "INVALID_ARGUMENT")]


@pytest.mark.parametrize(
    ("outcome", "code"),
    [(GivenBack(UNAVAILABLE), "UNAVAILABLE"), (PausedWhileWaiting(), PAUSED_CODE)],
    ids=["paused by the failure", "paused while it waited"],
)
@on_virtual_time
async def test_a_give_back_releases_the_job_uncharged(outcome: Outcome, code: str) -> None:
    rig = Rig()

    claim, job = await rig.write(outcome)

    ((method, params),) = rig.store.worker.writes
    assert method == "release" and params.token == claim.token
    assert job.status is JobStatus.PENDING and job.attempt_count == 0
    assert rig.metrics.outcomes == [(GIVEN_BACK, code)]


@on_virtual_time
async def test_shut_down_gives_the_job_back() -> None:
    rig = Rig()

    _, job = await rig.write(ShutDown())

    assert job.status is JobStatus.PENDING and job.attempt_count == 0
    assert rig.metrics.outcomes == [(GIVEN_BACK, SHUTDOWN_CODE)]


@pytest.mark.parametrize(
    ("outcome", "counted"),
    [(Cancelled(CANCELLED_WHY), [(CANCELLED, "CANCELLED")]), (LeaseLost(LEASE_LOST_WHY), [])],
)
@on_virtual_time
async def test_a_stopped_call_writes_nothing(
    outcome: Outcome, counted: list[tuple[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="job_service.worker")
    rig = Rig()

    claim, _ = await rig.write(outcome)

    assert rig.store.worker.writes == [] and rig.published.jobs == []
    assert rig.metrics.outcomes == counted
    assert f"job_id={claim.job.id}: gateway call stopped, {outcome.why}" in caplog.messages  # type: ignore[union-attr]


@on_virtual_time
async def test_an_outcome_the_store_refuses_ends_failed_internal() -> None:
    rig = Rig()
    rig.store.worker.refuse["complete"] = ValueError("a value the database refuses")

    _, job = await rig.write(Completed(GatewayAnswer(RESULT), call_seconds=0.1))

    assert [method for method, _ in rig.store.worker.writes] == ["complete", "fail"]
    assert job.status is JobStatus.FAILED and job.error_code == "INTERNAL"
    assert rig.metrics.outcomes == [(FAILED, "INTERNAL")]


@on_virtual_time
async def test_when_failing_it_fails_too_the_job_is_given_back() -> None:
    rig = Rig()
    rig.store.worker.refuse["fail"] = ValueError("refused as well")

    _, job = await rig.write(Failed(TOO_LONG))

    assert [method for method, _ in rig.store.worker.writes] == ["fail", "fail", "release"]
    assert job.status is JobStatus.PENDING and job.attempt_count == 0, "uncharged"
    assert rig.metrics.outcomes == [(GIVEN_BACK, "INTERNAL")]
