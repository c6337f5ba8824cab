"""The san page in headless Chromium says why a job waits when its job type is paused
(the AI provider is unavailable), instead of just "PENDING", live over its event
stream. Real ai-gateway, job-service and san-web processes; the pause is opened
through job-service's store, as another instance's breaker would."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC

import pytest
from conftest import Stack, _stop, start_web
from test_jobsctl_pauses import database_url, open_pause, waiting_stack
from test_web_page import browser, submit_text

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]

__all__ = ["browser", "waiting_stack"]  # fixtures, used by name

TEXT = "Providers fail now and then. A queue that knows it waits instead of failing jobs."


@pytest.fixture(scope="module")
def web_waiting(waiting_stack: Stack) -> Iterator[str]:
    web = start_web(waiting_stack.log_dir, waiting_stack.address)
    yield f"http://{web.address}"
    _stop(web)


def _status_text(driver: object, condition: object, timeout: float) -> str:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def read(d: object) -> str | bool:
        text = str(d.find_element(By.ID, "status").text)  # type: ignore[attr-defined]
        return text if condition(text) else False  # type: ignore[operator]

    return str(WebDriverWait(driver, timeout).until(read))


def test_a_waiting_job_says_the_provider_is_unavailable_since_when(
    browser: object, web_waiting: str, waiting_stack: Stack
) -> None:
    from selenium.webdriver.common.by import By

    submit_text(browser, web_waiting, TEXT)
    # The first attempt fails (the gateway is down); the retry is a minute away.
    _status_text(browser, lambda text: text == "PENDING", 30)
    attempt = browser.find_element(By.ID, "attempt").text  # type: ignore[attr-defined]
    assert attempt == "(attempt 1 of 5)"

    pause = open_pause(database_url(waiting_stack))

    since = pause.since.strftime("%H:%M")
    status = _status_text(browser, lambda text: text.startswith("Waiting:"), 10)
    assert status.startswith(
        f"Waiting: the AI provider has been unavailable since {since}; retrying"
    )
    timeline = browser.find_element(By.ID, "timeline").text  # type: ignore[attr-defined]
    assert f"unavailable since {since}" in timeline
    assert not browser.find_element(By.ID, "failure").is_displayed()  # type: ignore[attr-defined]

    # Through an outage the pause moves on every few seconds while the job stays as it
    # was: the timeline keeps one line for that state and rewrites it (it used to gain
    # a line with the same stale time at every move).
    lines = len(browser.find_elements(By.CSS_SELECTOR, "#timeline li"))  # type: ignore[attr-defined]
    for _ in range(2):
        time.sleep(1.1)  # so that the pause's `until` (shown to the second) moves
        until = open_pause(database_url(waiting_stack)).until.astimezone(UTC).strftime("%H:%M:%S")
        _status_text(browser, lambda text, until=until: until in text, 10)
    items = browser.find_elements(By.CSS_SELECTOR, "#timeline li")  # type: ignore[attr-defined]
    assert len(items) == lines
    assert until in items[-1].text and "unavailable since" in items[-1].text
