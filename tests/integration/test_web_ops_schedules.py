"""/ops's schedules: the list shows each schedule's next and last fire times, its last
job and skipped periods; an operator pauses and resumes one through PauseSchedule /
ResumeSchedule, under the same guards as /ops's other writes (role, session's CSRF
token). In process (httpx over ASGI), JobService faked in memory; the page's script
draws what the list answers (test_web_ops_page covers the browser side of /ops)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from google.protobuf.duration_pb2 import Duration

from san_jobs.client import CardAnalysisInput
from san_jobs.client.testing import FakeJobService
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.web._auth import AuthSettings
from san_jobs.web._passwords import hash_password
from san_jobs.web.app import create_app

FIRED = datetime(2026, 12, 3, 20, 0, tzinfo=UTC)
PASSWORD = "a long enough password"


def _add(service: FakeJobService, schedule_id: str, **period: object) -> pb.Schedule:
    schedule = pb.Schedule(
        schedule_id=schedule_id,
        template=pb.EnqueueRequest(
            job_type=pb.JOB_TYPE_CARD_ANALYSIS,
            target_id=f"{schedule_id}-target",
            card_analysis_input=CardAnalysisInput(text="x"),
        ),
    )
    for name, value in period.items():
        if isinstance(value, Duration):
            getattr(schedule, name).CopyFrom(value)
        else:
            setattr(schedule, name, value)
    return service.create_schedule(pb.CreateScheduleRequest(schedule=schedule)).schedule


@asynccontextmanager
async def _web(
    tmp_path: Path, service: FakeJobService, auth: AuthSettings | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        job_service="in-memory",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'web.db'}",
        client_factory=lambda _address: service.async_client(),
        auth=auth,
    )
    async with app.router.lifespan_context(app):
        for name, role in (("ops", "operator"), ("eve", "viewer"), ("pat", "user")):
            await app.state.store.add_user(name, hash_password(PASSWORD), role)
        # A loopback client: under --auth off, /ops answers it as an operator.
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            yield http


async def test_the_list_shows_fire_times_and_pause_pauses(tmp_path: Path) -> None:
    service = FakeJobService()
    every = Duration()
    every.FromSeconds(600)
    made = _add(service, "every-10m", interval=every)
    _add(service, "nightly", cron="0 21 * * *", time_zone="Europe/Paris")
    job = service.fire_schedule("nightly", period_start=FIRED)
    assert job is not None
    async with _web(tmp_path, service) as http:
        answer = await http.get("/api/ops/schedules")
        assert answer.status_code == 200, answer.text
        listed = {s["scheduleId"]: s for s in answer.json()["schedules"]}
        assert list(listed) == ["every-10m", "nightly"]
        interval = listed["every-10m"]
        next_fire = made.next_fire_time.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert interval["nextFireTime"] == next_fire
        assert interval["lastFireTime"] == "-" and interval["period"] == "every 10m"
        assert interval["paused"] is False and interval["jobType"] == "CARD_ANALYSIS"
        nightly = listed["nightly"]
        assert nightly["lastFireTime"] == "2026-12-03T20:00:00Z"
        assert nightly["lastJobId"] == job.id
        assert nightly["period"] == "cron 0 21 * * * Europe/Paris"
        assert nightly["targetId"] == "nightly-target" and nightly["skippedCount"] == 0

        paused = await http.post("/api/ops/schedules/pause", json={"scheduleId": "every-10m"})
        assert paused.status_code == 200, paused.text
        assert paused.json()["paused"] is True and paused.json()["nextFireTime"] == "-"
        assert [s.paused for s in service.schedules] == [True, False]
        assert "PauseSchedule" in [call.rpc for call in service.calls]
        listed_again = (await http.get("/api/ops/schedules")).json()["schedules"]
        assert listed_again[0]["paused"] is True

        resumed = await http.post("/api/ops/schedules/resume", json={"scheduleId": "every-10m"})
        assert resumed.status_code == 200 and resumed.json()["paused"] is False
        assert not service.schedules[0].paused


async def test_bad_or_unknown_ids(tmp_path: Path) -> None:
    async with _web(tmp_path, FakeJobService()) as http:
        missing = await http.post("/api/ops/schedules/pause", json={"scheduleId": "gone"})
        assert missing.status_code == 404
        assert missing.json()["error"]["reason"] == "SCHEDULE_NOT_FOUND"
        for body in ({}, {"scheduleId": 7}, {"scheduleId": "x" * 129}):
            refused = await http.post("/api/ops/schedules/resume", json=body)
            assert refused.status_code == 422, body
            fields = [v["field"] for v in refused.json()["error"]["fieldViolations"]]
            assert fields == ["scheduleId"]


async def _log_in(http: httpx.AsyncClient, name: str) -> dict[str, str]:
    http.cookies.clear()
    answer = await http.post("/api/session", json={"username": name, "password": PASSWORD})
    assert answer.status_code == 200, answer.text
    return {"X-CSRF-Token": answer.json()["csrfToken"]}


@pytest.mark.parametrize("action", ["pause", "resume"])
async def test_only_an_operator_with_the_sessions_token_changes_one(
    tmp_path: Path, action: str
) -> None:
    service = FakeJobService()
    every = Duration()
    every.FromSeconds(60)
    _add(service, "s", interval=every)
    path = f"/api/ops/schedules/{action}"
    async with _web(tmp_path, service, AuthSettings(mode="password")) as http:
        assert (await http.get("/api/ops/schedules")).status_code == 401  # no session
        await _log_in(http, "pat")
        assert (await http.get("/api/ops/schedules")).status_code == 403  # a plain user
        viewer = await _log_in(http, "eve")
        assert (await http.get("/api/ops/schedules")).status_code == 200  # a viewer looks
        looked = await http.post(path, json={"scheduleId": "s"}, headers=viewer)
        assert looked.status_code == 403
        assert looked.json()["error"]["code"] == "PERMISSION_DENIED"
        await _log_in(http, "ops")
        no_token = await http.post(path, json={"scheduleId": "s"})
        assert no_token.status_code == 403
        assert no_token.json()["error"]["code"] == "CSRF_TOKEN_MISSING"
        rpcs = [call.rpc for call in service.calls]
        assert "PauseSchedule" not in rpcs and "ResumeSchedule" not in rpcs  # refused before
        operator = await _log_in(http, "ops")
        done = await http.post(path, json={"scheduleId": "s"}, headers=operator)
        assert done.status_code == 200, done.text
        assert done.json()["paused"] is (action == "pause")
        assert [call.rpc for call in service.calls][-1] == f"{action.capitalize()}Schedule"
