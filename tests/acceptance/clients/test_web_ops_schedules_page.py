"""/ops's schedules table in headless Chromium: the page draws each schedule's next
and last fire times and last job from /api/ops/schedules, and its pause button pauses
the schedule (then offers resume). san-web runs in process under uvicorn on
loopback (``--auth off``: the loopback browser is an operator), JobService is
faked in memory; the role and CSRF rules are test_web_ops_schedules' (the routes).
About 5 s, most of it Chromium starting."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from google.protobuf.duration_pb2 import Duration
from test_web_page import browser, wait_visible

from san_jobs.client import CardAnalysisInput
from san_jobs.client.testing import FakeJobService
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.web.app import create_app

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]

__all__ = ["browser"]  # a fixture, used by name

FIRED = datetime(2026, 12, 3, 20, 0, tzinfo=UTC)


def _add(service: FakeJobService, schedule_id: str, schedule: pb.Schedule) -> None:
    schedule.schedule_id = schedule_id
    schedule.template.CopyFrom(
        pb.EnqueueRequest(
            job_type=pb.JOB_TYPE_CARD_ANALYSIS,
            target_id="digest",
            card_analysis_input=CardAnalysisInput(text="x"),
        )
    )
    service.create_schedule(pb.CreateScheduleRequest(schedule=schedule))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, FakeJobService]]:
    """san-web over a fake JobService, on a loopback port; its base URL and the fake."""
    service = FakeJobService()
    app = create_app(
        job_service="in-memory",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'web.db'}",
        client_factory=lambda _address: service.async_client(),
    )
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "san-web did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", service
    finally:
        server.should_exit = True
        thread.join(10)
        listener.close()


def test_the_table_shows_fire_times_and_pause_pauses(
    browser: Any, served: tuple[str, FakeJobService]
) -> None:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, service = served
    every = pb.Schedule()
    every.interval.CopyFrom(Duration(seconds=600))
    _add(service, "every-10m", every)
    _add(service, "nightly", pb.Schedule(cron="0 21 * * *", time_zone="Europe/Paris"))
    job = service.fire_schedule("nightly", period_start=FIRED)
    assert job is not None
    next_fire = service.schedules[0].next_fire_time.ToDatetime(tzinfo=UTC)

    browser.get(base + "/ops")
    wait_visible(browser, "schedule-list")

    def row_when(schedule_id: str, *wanted: str) -> str:
        """The schedule's row text once it holds every ``wanted`` text (the page
        redraws the table every 3 s: a row found may be replaced before it is read)."""

        def read(_: Any) -> str | bool:
            try:
                text = str(
                    browser.find_element(
                        By.CSS_SELECTOR, f'tr[data-schedule-id="{schedule_id}"]'
                    ).text
                )
            except (NoSuchElementException, StaleElementReferenceException):
                return False
            return text if all(w in text for w in wanted) else False

        return str(WebDriverWait(browser, 10).until(read))

    row_when("nightly", "2026-12-03T20:00:00Z", job.id, "cron 0 21 * * * Europe/Paris")
    row_when("every-10m", next_fire.strftime("%Y-%m-%dT%H:%M:%SZ"), "running", "pause")

    def click(_: Any) -> bool:
        try:
            browser.find_element(By.CSS_SELECTOR, 'tr[data-schedule-id="every-10m"] button').click()
        except StaleElementReferenceException:
            return False
        return True

    WebDriverWait(browser, 10).until(click)
    WebDriverWait(browser, 10).until(lambda _: service.schedules[0].paused)
    row_when("every-10m", "paused", "resume")
    assert not service.schedules[1].paused  # only the one clicked
