"""san-web's HTTP API over real HTTP, against real job-service and ai-gateway processes."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from conftest import scrap_job_id

pytestmark = pytest.mark.acceptance

TEXT = (
    "Starlette is a lightweight ASGI framework. It serves streaming responses. "
    "Uvicorn runs ASGI applications. Server-Sent Events stream job progress to a page."
)


def sse_events(base: str, job_id: str) -> list[tuple[str, dict[str, object]]]:
    events: list[tuple[str, dict[str, object]]] = []
    name = ""
    with httpx.stream("GET", f"{base}/api/async-jobs/{job_id}/events", timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
    return events


def test_scrap_is_analysed_and_streamed(web_ok: str) -> None:
    created = httpx.post(
        f"{web_ok}/api/scraps", json={"url": "https://a.test", "title": "ASGI", "text": TEXT}
    )
    assert created.status_code == 202
    body = created.json()
    scrap_id = body["scrapId"]
    job_id = body["jobId"] or scrap_job_id(web_ok, scrap_id)

    events = sse_events(web_ok, job_id)
    names = [name for name, _ in events]
    assert names[-1] == "end" and "problem" not in names
    jobs = [data for name, data in events if name == "job"]
    assert jobs[-1]["status"] == "COMPLETED"
    # Each state once, in the order a job lives them (the stream may join late, so
    # the first ones can be missing): never repeated, never out of order.
    statuses = [job["status"] for job in jobs]
    assert statuses == [s for s in ("PENDING", "PROCESSING", "COMPLETED") if s in statuses]

    job = httpx.get(f"{web_ok}/api/async-jobs/{job_id}").json()
    assert job["jobId"] == job_id and job["jobType"] == "CARD_ANALYSIS"
    assert job["status"] == "COMPLETED" and job["errorMessage"] is None
    assert job["targetId"] == scrap_id
    assert job["result"]["summary"] and job["result"]["tags"]

    scrap = httpx.get(f"{web_ok}/api/scraps/{scrap_id}").json()
    assert scrap["jobId"] == job_id and scrap["text"] == TEXT
    assert scrap["state"] == "delivered" and scrap["handoff"] == {
        "state": "delivered",
        "reason": None,
    }

    deleted = httpx.delete(f"{web_ok}/api/scraps/{scrap_id}")
    assert deleted.status_code == 200 and deleted.json()["cancelledJobIds"] == []
    assert httpx.get(f"{web_ok}/api/scraps/{scrap_id}").status_code == 404
    assert httpx.delete(f"{web_ok}/api/scraps/{scrap_id}").status_code == 404


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"title": "no text"}, "text"),
        ({"text": "   "}, "text"),
        ({"text": 42}, "text"),
        ({"text": "ok", "url": ["x"]}, "url"),
        ([1, 2], "body"),
    ],
)
def test_bad_scrap_is_422(web_ok: str, payload: object, field: str) -> None:
    response = httpx.post(f"{web_ok}/api/scraps", json=payload)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert field in [v["field"] for v in error["fieldViolations"]]


def test_job_service_rejection_is_a_refused_handoff(web_ok: str) -> None:
    response = httpx.post(f"{web_ok}/api/scraps", json={"text": "x" * 100_001})
    assert response.status_code == 202  # saved; JobService is asked afterwards
    scrap_id = response.json()["scrapId"]
    for _ in range(600):
        scrap = httpx.get(f"{web_ok}/api/scraps/{scrap_id}").json()
        if scrap["state"] != "queued":
            break
        time.sleep(0.05)
    assert scrap["state"] == "refused" and scrap["jobId"] is None
    assert scrap["handoff"]["state"] == "refused"
    assert "INVALID_ARGUMENT" in scrap["handoff"]["reason"] or "text" in scrap["handoff"]["reason"]


def test_unknown_and_malformed_job_ids(web_ok: str) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    for path in (f"/api/async-jobs/{unknown}", f"/api/async-jobs/{unknown}/events"):
        response = httpx.get(web_ok + path)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "NOT_FOUND"
    malformed = httpx.get(f"{web_ok}/api/async-jobs/not-a-uuid")
    assert malformed.status_code == 422
    assert malformed.json()["error"]["fieldViolations"]


def test_duplicate_is_409_and_delete_cancels_active_jobs(web_slow: str) -> None:
    created = httpx.post(f"{web_slow}/api/scraps", json={"text": TEXT}).json()
    scrap_id = created["scrapId"]
    job_id = scrap_job_id(web_slow, scrap_id)
    again = httpx.post(f"{web_slow}/api/scraps/{scrap_id}/analyze")
    assert again.status_code == 409
    assert again.json()["error"]["existingJobId"] == job_id

    deleted = httpx.delete(f"{web_slow}/api/scraps/{scrap_id}")
    assert deleted.status_code == 200
    assert deleted.json()["cancelledJobIds"] == [job_id]
    job = httpx.get(f"{web_slow}/api/async-jobs/{job_id}").json()
    assert job["status"] == "CANCELLED"
    events = sse_events(web_slow, job_id)
    assert [name for name, _ in events] == ["job", "end"]


def test_failure_is_streamed_with_its_reason(web_failing: str) -> None:
    scrap_id = httpx.post(f"{web_failing}/api/scraps", json={"text": TEXT}).json()["scrapId"]
    job_id = scrap_job_id(web_failing, scrap_id)
    jobs = [data for name, data in sse_events(web_failing, job_id) if name == "job"]
    assert jobs[-1]["status"] == "FAILED"
    assert str(jobs[-1]["errorMessage"]).startswith("AI gateway unavailable")
    assert jobs[-1]["errorCode"] == "UNAVAILABLE"


def test_job_service_down_is_a_queued_handoff_not_an_error(web_down: str) -> None:
    created = httpx.post(f"{web_down}/api/scraps", json={"text": TEXT})
    assert created.status_code == 202
    assert created.json()["jobId"] is None and created.json()["state"] == "queued"
    scrap_id = created.json()["scrapId"]
    for _ in range(600):
        scrap = httpx.get(f"{web_down}/api/scraps/{scrap_id}").json()
        if scrap["handoff"]["reason"]:
            break
        time.sleep(0.05)
    assert scrap["state"] == "queued" and scrap["jobId"] is None
    assert scrap["handoff"]["reason"] == "the job service is not reachable yet"
    again = httpx.post(f"{web_down}/api/scraps/{scrap_id}/analyze")
    assert again.status_code == 503  # "analyze again" still asks JobService directly
    assert "JobService is unavailable" in again.json()["error"]["message"]
    job = httpx.get(f"{web_down}/api/async-jobs/00000000-0000-4000-8000-000000000000")
    assert job.status_code == 503
