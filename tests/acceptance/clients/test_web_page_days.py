"""The san page's "Today I learned" in headless Chromium, over real job-service,
ai-gateway (built-in backend) and san-web processes: two scraps become cards, the
open day is made from the page ("Make it now"), its note appears, the quiz shows one
question at a time, an answer is revealed, "Next question" moves on, and a question's
source leads to the scrap it came from (issue 43). And a day that failed: it says why,
naming the scrap whose card failed, with a link to it, and offers "Make it again"."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import Stack, _stop, scrap_job_id, start_web
from test_web_cards_e2e import wait_for_cards
from test_web_page import TEXT, browser, wait_visible

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]
__all__ = ["browser"]  # the Chromium fixture, shared with test_web_page

OTHER = (
    "Sourdough bread needs a lively starter, flour, water and salt. The dough rests "
    "overnight in a cool place and bakes in a very hot oven."
)


@pytest.fixture
def web_of_days(ok_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A san-web of its own (its own database: its days are only this test's)."""
    folder = tmp_path_factory.mktemp("page-days")
    web = start_web(
        folder, ok_stack.address, database_url=f"sqlite+aiosqlite:///{folder / 'web.db'}"
    )
    yield f"http://{web.address}"
    _stop(web)


def test_a_day_its_note_and_a_question_revealed(browser: object, web_of_days: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, driver = web_of_days, browser
    page: Any = driver
    saved = {}
    for title, text in (("Queues", TEXT), ("Bread", OTHER)):
        answer = httpx.post(f"{base}/api/scraps", json={"title": title, "text": text})
        assert answer.status_code == 202, answer.text
        saved[answer.json()["scrapId"]] = title
    wait_for_cards(base, list(saved), within=30)

    page.get(base + "/")
    day = httpx.get(f"{base}/api/days").json()["days"][0]
    assert day["status"] == "OPEN"
    button = WebDriverWait(page, 10).until(
        lambda d: d.find_element(By.CSS_SELECTOR, f"#day-list button[data-day='{day['day']}']")
    )
    assert "OPEN" in button.text
    button.click()
    assert wait_visible(page, "day-heading", timeout=10) == day["day"]
    shown = {e.text for e in page.find_elements(By.CSS_SELECTOR, "#day-scraps li a")}
    assert shown == {"Queues", "Bread"}

    page.find_element(By.ID, "day-generate").click()
    title = wait_visible(page, "day-note-title", timeout=30)
    assert title
    assert page.find_element(By.ID, "day-note-body").text
    question = WebDriverWait(page, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#quiz li") or False
    )
    assert len(question) == 1  # one question at a time
    count = page.find_element(By.ID, "quiz-count").text
    total = int(count.rsplit(" ", 1)[1])
    assert count == f"Question 1 of {total}" and total >= 2
    first = question[0]
    answer = first.find_element(By.CSS_SELECTOR, ".answer")
    assert not answer.is_displayed()
    first.find_element(By.CSS_SELECTOR, "button.reveal").click()
    WebDriverWait(page, 5).until(lambda _d: answer.is_displayed())
    assert answer.text
    assert not first.find_element(By.CSS_SELECTOR, "button.reveal").is_displayed()
    status = page.find_element(By.ID, "day-status").text
    assert status == "COMPLETED", httpx.get(f"{base}/api/days/{day['day']}").text
    assert page.find_element(By.ID, "day-generate").text == "Make it again"

    # Next shows the second question, its answer hidden; then on until a question
    # leads to a scrap of the day; following it opens that scrap.
    links: list[Any] = []
    for shown_at in range(1, total + 1):
        page.find_element(By.ID, "quiz-next").click()
        expected = f"Question {shown_at % total + 1} of {total}"
        assert page.find_element(By.ID, "quiz-count").text == expected
        assert not page.find_element(By.CSS_SELECTOR, "#quiz li .answer").is_displayed()
        links = page.find_elements(By.CSS_SELECTOR, "#quiz li .source a")
        if links:
            break
    assert links, "no question cites a scrap"
    cited = links[0].text
    assert cited in saved.values()
    links[0].click()
    assert wait_visible(page, "scrap-title", timeout=10) == cited


@pytest.fixture
def web_of_failures(
    failing_stack: Stack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A san-web of its own on the stack whose gateway fails every call (once)."""
    folder = tmp_path_factory.mktemp("page-failed-day")
    web = start_web(
        folder, failing_stack.address, database_url=f"sqlite+aiosqlite:///{folder / 'web.db'}"
    )
    yield f"http://{web.address}"
    _stop(web)


def test_a_failed_day_says_which_scraps_card_failed_and_offers_to_make_it_again(
    browser: object, web_of_failures: str
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, page = web_of_failures, browser
    driver: Any = page
    answer = httpx.post(f"{base}/api/scraps", json={"title": "Comets", "text": TEXT})
    assert answer.status_code == 202, answer.text
    scrap = answer.json()["scrapId"]
    job_id = scrap_job_id(base, scrap)
    deadline = time.monotonic() + 30
    while httpx.get(f"{base}/api/async-jobs/{job_id}").json()["status"] != "FAILED":
        assert time.monotonic() < deadline, "the card never failed"
        time.sleep(0.1)
    day = httpx.get(f"{base}/api/days").json()["days"][0]["day"]

    driver.get(base + "/")
    WebDriverWait(driver, 10).until(
        lambda d: d.find_element(By.CSS_SELECTOR, f"#day-list button[data-day='{day}']")
    ).click()
    assert wait_visible(driver, "day-heading", timeout=10) == day
    driver.find_element(By.ID, "day-generate").click()
    WebDriverWait(driver, 30).until(
        lambda d: d.find_element(By.ID, "day-status").text == "CANCELLED"
    )
    error = driver.find_element(By.ID, "day-error")
    assert error.text == f"Dependency {job_id} FAILED: the card of Comets failed", error.text
    assert driver.find_element(By.ID, "day-generate").text == "Make it again"
    assert driver.find_element(By.ID, "day-generate").is_enabled()
    assert not driver.find_element(By.ID, "day-note").is_displayed()
    error.find_element(By.CSS_SELECTOR, "a").click()
    assert wait_visible(driver, "scrap-title", timeout=10) == "Comets"
