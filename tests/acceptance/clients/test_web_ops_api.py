"""san-web's /ops API over real HTTP: a real san-web (``--auth password``) in front of
real job-service and ai-gateway processes. The gateway always answers UNAVAILABLE and
job-service gives up after one attempt, so jobs fail at once; TIL_GENERATION is paused
(opened through the store, as a breaker would), so its jobs stay PENDING to be
cancelled. Users are made with the real ``san-web users create --role`` and
``users set-role``.

Who may do what: no session 401 (the page: the login page); a plain user 403; a
viewer reads; an operator also retries and cancels. Bad input is 422 naming the field.
Under ``job-service --auth token``, a submitter token for san-web is told as such.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from conftest import Stack, _stack, _stop, start_web

from san_jobs.client import CardAnalysisInput, JobsClient, JobStatus, TilGenerationInput
from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.model import Failure, JobType, NewJob, OnDuplicate
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    EnqueueParams,
    FailParams,
    OpenPauseParams,
    ReleaseParams,
)
from san_jobs.job_service.storage.repository import SqlJobStore
from san_jobs.shared.display import format_time
from tests.support.processes import BIN, running, start_gateway, start_job_service
from tests.support.program_forks import run_forked

pytestmark = pytest.mark.acceptance

PASSWORDS = {"ops": "operator password", "eve": "viewer password", "pat": "plain user pw"}
OPS_PW = "an operator passphrase"  # 12 characters at least, as `users create` asks
ROLES = {"ops": "operator", "eve": "viewer", "pat": "user"}
PAUSED_ERROR = "Rate Limit Exceeded (Too many requests)"


@dataclass
class OpsWeb:
    base: str
    stack: Stack
    database_url: str  # san-web's


def web_users(database_url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The real ``san-web users ...`` command."""
    return run_forked(
        BIN / "san-web", ["users", *args, "--database-url", database_url], input=stdin
    )


def open_til_pause(jobs_database_url: str) -> DispatchPause:
    """Pause TIL_GENERATION for 10 minutes in job-service's database."""

    async def open_it() -> DispatchPause:
        store = SqlJobStore(jobs_database_url, instance_id="other-instance")
        try:
            return await store.pauses.open_pause(
                OpenPauseParams(
                    job_type=JobType.TIL_GENERATION,
                    reason=PauseReason.RATE_LIMITED,
                    until=datetime.now(UTC) + timedelta(minutes=10),
                    last_error=PAUSED_ERROR,
                    instance_id="other-instance",
                )
            )
        finally:
            await store.close()

    return asyncio.run(open_it())


@pytest.fixture(scope="module")
def ops_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("ops-stack")
    for stack in _stack(
        folder,
        ["--fault-unavailable-rate", "1.0"],
        ["--max-attempts", "1", "--breaker-failures", "1000000"],
    ):
        open_til_pause(f"sqlite+aiosqlite:///{folder / 'jobs.db'}")
        yield stack


@pytest.fixture(scope="module")
def ops_web(ops_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpsWeb]:
    folder = tmp_path_factory.mktemp("ops-web")
    database_url = f"sqlite+aiosqlite:///{folder / 'web.db'}"
    for name, password in PASSWORDS.items():
        # eve is made a plain user first, then given her role: both commands are used.
        role = "user" if name == "eve" else ROLES[name]
        made = web_users(database_url, "create", name, "--role", role, stdin=password)
        assert made.returncode == 0, made.stderr
    changed = web_users(database_url, "set-role", "eve", "viewer")
    assert changed.returncode == 0, changed.stderr
    web = start_web(folder, ops_stack.address, "--auth", "password", database_url=database_url)
    try:
        yield OpsWeb(f"http://{web.address}", ops_stack, database_url)
    finally:
        _stop(web)


LogIn = Callable[[str], tuple[httpx.Client, dict[str, str]]]


@pytest.fixture
def log_in(ops_web: OpsWeb) -> Iterator[LogIn]:
    """``log_in(name)``: a client holding ``name``'s session, and the headers a write
    needs (the session's CSRF token); closed after the test."""
    clients: list[httpx.Client] = []

    def open_session(name: str) -> tuple[httpx.Client, dict[str, str]]:
        client = httpx.Client(base_url=ops_web.base, timeout=30)
        clients.append(client)
        answer = client.post("/api/session", json={"username": name, "password": PASSWORDS[name]})
        assert answer.status_code == 200, answer.text
        return client, {"X-CSRF-Token": answer.json()["csrfToken"]}

    yield open_session
    for client in clients:
        client.close()


def fail_jobs(address: str, count: int, prefix: str) -> list[str]:
    """``count`` CARD_ANALYSIS jobs that fail at once (the gateway is down); their ids,
    once every one is FAILED."""
    with JobsClient(address) as client:
        ids = [
            client.enqueue(f"{prefix}-{i}", CardAnalysisInput(text=f"{prefix} {i}")).job.id
            for i in range(count)
        ]
        deadline = time.monotonic() + 30
        while any(client.get_job(i).status != JobStatus.JOB_STATUS_FAILED for i in ids):
            assert time.monotonic() < deadline, "the jobs did not fail"
            time.sleep(0.05)
    return ids


def fail_paused_job(jobs_database_url: str, target: str, message: str) -> str:
    """A TIL_GENERATION job (the paused type: job-service's worker leaves it alone)
    failed through the store with ``message``, as a gateway's error text could be."""

    async def fail_it() -> str:
        store = SqlJobStore(jobs_database_url, instance_id="test")
        try:
            new = NewJob(
                job_type=JobType.TIL_GENERATION,
                target_id=target,
                request_params={"day": "2026-11-29", "notes": ["a note"]},
                requested_by="test",
                request_id=None,
                max_attempts=1,
            )
            job, _ = await store.commands.enqueue(
                EnqueueParams(job=new, on_duplicate=OnDuplicate.REJECT)
            )
            claims = await store.worker.claim(
                ClaimParams(limit=1000, lease_seconds=60, only_type=JobType.TIL_GENERATION)
            )
            for claim in claims:
                if claim.job.id != job.id:
                    await store.worker.release(
                        ReleaseParams(job_id=claim.job.id, token=claim.token)
                    )
            (mine,) = [c for c in claims if c.job.id == job.id]
            failure = Failure("INTERNAL", "MALFORMED_RESPONSE", message, transient=False)
            await store.worker.fail(
                FailParams(job_id=job.id, token=mine.token, failure=failure, retry_at=None)
            )
            return job.id
        finally:
            await store.close()

    return asyncio.run(fail_it())


def pending_til(address: str, target: str) -> str:
    """A TIL_GENERATION job: its type is paused, so it stays PENDING."""
    with JobsClient(address) as client:
        job = client.enqueue(target, TilGenerationInput(day="2026-11-29", notes=["a note"]))
    return job.job.id


def test_who_may_see_and_do_what(ops_web: OpsWeb, log_in: LogIn) -> None:
    base = ops_web.base
    # No session: the page sends to the login page, which is told to come back to
    # /ops; the API says 401.
    anonymous = httpx.get(f"{base}/ops")
    assert (anonymous.status_code, anonymous.headers["location"]) == (303, "/login?next=/ops")
    assert httpx.get(f"{base}/api/ops/overview").status_code == 401

    plain, plain_headers = log_in("pat")
    page = plain.get("/ops")
    assert page.status_code == 403 and "Not allowed" in page.text
    # Who asks decides which page /ops is: never from a browser's cache.
    assert page.headers["cache-control"] == "no-store"
    for path in ("/api/ops/overview", "/api/ops/failures"):
        refused = plain.get(path)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "PERMISSION_DENIED"
        assert "(yours: user)" in refused.json()["error"]["message"]

    viewer, viewer_headers = log_in("eve")
    assert viewer.get("/ops").status_code == 200
    overview = viewer.get("/api/ops/overview")
    assert overview.status_code == 200, overview.text
    assert (overview.json()["user"], overview.json()["role"]) == ("eve", "viewer")
    assert viewer.get("/api/ops/failures").status_code == 200
    writes = {
        "/api/ops/retry-failed": {"failedWithinHours": 1, "dryRun": True},
        "/api/ops/cancel": {"jobId": "00000000-0000-4000-8000-000000000000"},
    }
    for path, body in writes.items():
        refused = viewer.post(path, json=body, headers=viewer_headers)
        assert refused.status_code == 403, refused.text
        assert "needs the operator role (yours: viewer)" in refused.json()["error"]["message"]
        assert plain.post(path, json=body, headers=plain_headers).status_code == 403

    operator, headers = log_in("ops")
    # Writes need the session's CSRF token, as every write does.
    no_token = operator.post("/api/ops/retry-failed", json={"failedWithinHours": 1})
    assert no_token.json()["error"]["code"] == "CSRF_TOKEN_MISSING"
    dry = operator.post("/api/ops/retry-failed", json={"failedWithinHours": 1}, headers=headers)
    assert dry.status_code == 200, dry.text
    assert dry.json()["dryRun"] is True and dry.json()["retriedCount"] == 0

    # A role taken away applies at once, to the live session too.
    assert web_users(ops_web.database_url, "set-role", "eve", "user").returncode == 0
    try:
        assert viewer.get("/api/ops/overview").status_code == 403
    finally:
        assert web_users(ops_web.database_url, "set-role", "eve", "viewer").returncode == 0
    assert web_users(ops_web.database_url, "set-role", "nobody", "viewer").returncode == 1


def test_overview_failures_retry_and_cancel(ops_web: OpsWeb, log_in: LogIn) -> None:
    address = ops_web.stack.address
    failed = fail_jobs(address, 3, "ops-api")
    waiting = pending_til(address, "ops-api-til")
    operator, headers = log_in("ops")

    overview = operator.get("/api/ops/overview").json()
    counts = {(c["jobType"], c["status"]): c["count"] for c in overview["counts"]}
    assert counts[("CARD_ANALYSIS", "FAILED")] >= 3
    assert counts[("TIL_GENERATION", "PENDING")] >= 1
    assert overview["oldestPending"]["ageSeconds"] >= 0
    (paused,) = overview["paused"]
    assert (paused["jobType"], paused["reason"], paused["lastError"]) == (
        "TIL_GENERATION",
        "RATE_LIMITED",
        PAUSED_ERROR,
    )

    groups = operator.get("/api/ops/failures", params={"hours": 1}).json()
    (down,) = [g for g in groups["groups"] if g["errorCode"] == "UNAVAILABLE"]
    assert down["count"] >= 3 and down["messagePrefix"].startswith("AI gateway unavailable")
    assert groups["messagePrefixLength"] == 80

    retry = {
        "jobType": "CARD_ANALYSIS",
        "errorMessageContains": "AI gateway unavailable",
        "failedWithinHours": 1,
    }
    dry = operator.post("/api/ops/retry-failed", json=retry | {"dryRun": True}, headers=headers)
    assert dry.status_code == 200, dry.text
    assert dry.json()["matchedCount"] >= 3 and dry.json()["retriedCount"] == 0
    with JobsClient(address) as client:
        statuses = {client.get_job(i).status for i in failed}
    assert statuses == {JobStatus.JOB_STATUS_FAILED}, "a dry run moves nothing"
    moved = operator.post("/api/ops/retry-failed", json=retry | {"dryRun": False}, headers=headers)
    assert moved.status_code == 200, moved.text
    assert moved.json()["retriedCount"] >= 3
    assert set(failed) <= set(moved.json()["jobIds"])
    # The audit line names the san-web user.
    deadline = time.monotonic() + 10
    while "RetryFailed by web:ops" not in ops_web.stack.job_service.log():
        assert time.monotonic() < deadline, ops_web.stack.job_service.log_tail()
        time.sleep(0.05)

    cancelled = operator.post(
        "/api/ops/cancel", json={"jobId": waiting, "reason": "stale"}, headers=headers
    )
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json() == {
        "jobId": waiting,
        "status": "CANCELLED",
        "cancelReason": "cancelled by web:ops: stale",
    }
    again = operator.post("/api/ops/cancel", json={"jobId": waiting}, headers=headers)
    assert again.status_code == 409, again.text


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/ops/failures?hours=0", None, "hours"),
        ("/api/ops/failures?hours=many", None, "hours"),
        ("/api/ops/failures?hours=745", None, "hours"),
        ("/api/ops/failures?jobType=NOPE", None, "jobType"),
        ("/api/ops/retry-failed", {"failedWithinHours": 10_000}, "failedWithinHours"),
        ("/api/ops/retry-failed", {"failedWithinHours": True}, "failedWithinHours"),
        ("/api/ops/retry-failed", {"jobType": 7}, "jobType"),
        ("/api/ops/retry-failed", {"errorMessageContains": "a\x00b"}, "errorMessageContains"),
        ("/api/ops/retry-failed", {"errorMessageContains": "x" * 1004}, "errorMessageContains"),
        ("/api/ops/retry-failed", {"dryRun": "yes"}, "dryRun"),
        ("/api/ops/retry-failed", [1, 2], "body"),
        ("/api/ops/cancel", {}, "jobId"),
        ("/api/ops/cancel", {"jobId": 12}, "jobId"),
        ("/api/ops/cancel", {"jobId": "x" * 65}, "jobId"),
        ("/api/ops/cancel", {"jobId": "not-a-uuid"}, "job_id"),  # JobService's own check
        (
            "/api/ops/cancel",
            {"jobId": "00000000-0000-4000-8000-000000000000", "reason": 5},
            "reason",
        ),
    ],
)
def test_bad_input_is_422_naming_the_field(
    log_in: LogIn, path: str, body: object, field: str
) -> None:
    operator, headers = log_in("ops")
    answer = operator.get(path) if body is None else operator.post(path, json=body, headers=headers)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert field in [v["field"] for v in error["fieldViolations"]], error


def test_schedules_with_their_fire_times_and_pause(ops_web: OpsWeb, log_in: LogIn) -> None:
    """A real job-service fires a 1 s schedule (its TIL_GENERATION jobs stay PENDING:
    the type is paused, so later periods are skipped as overlaps); /ops lists it with
    its last fire and job, a cron one with its next fire; a viewer may not pause, an
    operator pauses and resumes through JobService."""
    til = TilGenerationInput(day="2026-12-04", notes=["a note"])
    with JobsClient(ops_web.stack.address) as client:
        client.create_schedule("ops-tick", "ops-schedule-til", til, interval=timedelta(seconds=1))
        nightly = client.create_schedule(
            "ops-nightly", "ops-nightly-til", til, cron="0 21 * * *", time_zone="Europe/Paris"
        )
        try:
            deadline = time.monotonic() + 10
            while not (tick := client.get_schedule("ops-tick")).last_job_id:
                assert time.monotonic() < deadline, "job-service never fired the schedule"
                time.sleep(0.1)
            viewer, viewer_headers = log_in("eve")
            answer = viewer.get("/api/ops/schedules")
            assert answer.status_code == 200, answer.text
            listed = {s["scheduleId"]: s for s in answer.json()["schedules"]}
            shown_tick = listed["ops-tick"]
            assert shown_tick["lastJobId"] == tick.last_job_id
            assert shown_tick["lastFireTime"] == format_time(tick.last_fire_time) != "-"
            assert shown_tick["period"] == "every 1s" and shown_tick["nextFireTime"] != "-"
            shown_nightly = listed["ops-nightly"]
            assert shown_nightly["nextFireTime"] == format_time(nightly.next_fire_time) != "-"
            assert shown_nightly["lastFireTime"] == "-"
            assert shown_nightly["period"] == "cron 0 21 * * * Europe/Paris"

            body = {"scheduleId": "ops-tick"}
            refused = viewer.post("/api/ops/schedules/pause", json=body, headers=viewer_headers)
            assert refused.status_code == 403, refused.text
            assert not client.get_schedule("ops-tick").paused
            operator, headers = log_in("ops")
            paused = operator.post("/api/ops/schedules/pause", json=body, headers=headers)
            assert paused.status_code == 200, paused.text
            assert paused.json()["paused"] is True
            assert client.get_schedule("ops-tick").paused
            resumed = operator.post("/api/ops/schedules/resume", json=body, headers=headers)
            assert resumed.status_code == 200 and resumed.json()["paused"] is False
            assert not client.get_schedule("ops-tick").paused
            gone = operator.post(
                "/api/ops/schedules/pause", json={"scheduleId": "no-such"}, headers=headers
            )
            assert gone.status_code == 404
            assert gone.json()["error"]["reason"] == "SCHEDULE_NOT_FOUND"
        finally:  # the other tests count jobs: this schedule makes no more
            client.delete_schedule("ops-tick")
            client.delete_schedule("ops-nightly")
            for job in client.iter_jobs(target_id="ops-schedule-til"):
                if job.status == JobStatus.JOB_STATUS_PENDING:
                    client.cancel_job(job.id)


def _token(database_url: str, name: str, role: str, folder: Path) -> Path:
    made = subprocess.run(
        [str(BIN / "job-service"), "tokens", "create", name, "--role", role,
         "--database-url", database_url],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    path = folder / f"{name}.token"
    path.write_text(made.stdout)
    path.chmod(0o600)
    return path


def test_under_token_auth_the_page_says_what_san_web_s_token_lacks(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    jobs_url = f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
    submitter = _token(jobs_url, "san-web-submitter", "submitter", tmp_path)
    operator = _token(jobs_url, "san-web-operator", "operator", tmp_path)
    web_url = f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"
    assert web_users(web_url, "create", "ops", "--role", "operator", stdin=OPS_PW).returncode == 0
    with (
        running(start_gateway(tmp_path)) as gateway,
        running(
            start_job_service(
                tmp_path, "--auth", "token", gateway=gateway.address, database_url=jobs_url
            )
        ) as job_service,
    ):
        for token, expected in ((submitter, 502), (operator, 200)):
            web = start_web(
                tmp_path, job_service.address, "--auth", "password",
                "--job-service-token-file", str(token), database_url=web_url,
            )  # fmt: skip
            with running(web), httpx.Client(base_url=f"http://{web.address}", timeout=30) as client:
                login = client.post("/api/session", json={"username": "ops", "password": OPS_PW})
                headers = {"X-CSRF-Token": login.json()["csrfToken"]}
                answers = [
                    client.get("/api/ops/overview"),
                    client.get("/api/ops/failures"),
                    client.post("/api/ops/retry-failed", json={"dryRun": True}, headers=headers),
                ]
                for answer in answers:
                    assert answer.status_code == expected, answer.text
                    if expected == 502:
                        error = answer.json()["error"]
                        assert error["code"] == "JOB_SERVICE_PERMISSION_DENIED"
                        assert "JobService token lacks the operator role" in error["message"]
        # Under token auth the audit line names the token, not the san-web user.
        assert "RetryFailed (dry run) by san-web-operator (operator)" in job_service.log()
