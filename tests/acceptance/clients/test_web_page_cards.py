"""The scraps list of the san page in headless Chromium: several analyses in flight at
once, the list surviving a reload, and each scrap's knowledge card with its related
scraps. Real job-service, ai-gateway and san-web processes; the cards are written into
san-web's database by the change feed's handler, called here as the SDK's inbox will
call it (the inbox is not wired into san-web yet)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Stack, _stop, scrap_job_id, start_web
from sqlalchemy.ext.asyncio import create_async_engine
from test_web_page import TEXT, browser, wait_visible

from san_jobs.client import AsyncJobsClient, JobStatus
from san_jobs.web._cards import apply_job_change

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]
__all__ = ["browser"]  # the Chromium fixture, shared with test_web_page

OTHER = (
    "Sourdough bread needs a lively starter, flour, water and salt. The dough rests "
    "overnight in a cool place and bakes in a very hot oven."
)


def _own_web(stack: Stack, folder: Path) -> tuple[Any, str, str]:
    database_url = f"sqlite+aiosqlite:///{folder / 'web.db'}"
    web = start_web(folder, stack.address, database_url=database_url)
    return web, f"http://{web.address}", database_url


@pytest.fixture(scope="module")
def web_slow_own(slow_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    web, base, _url = _own_web(slow_stack, tmp_path_factory.mktemp("page-cards-slow"))
    yield base
    _stop(web)


@pytest.fixture(scope="module")
def web_ok_own(
    ok_stack: Stack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, str]]:
    web, base, url = _own_web(ok_stack, tmp_path_factory.mktemp("page-cards-ok"))
    yield base, url, ok_stack.address
    _stop(web)


def _submit(driver: Any, title: str, text: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, "title").send_keys(title)
    driver.find_element(By.ID, "text").send_keys(text)
    driver.find_element(By.ID, "submit").click()


def _listed(driver: Any, count: int, timeout: float = 30) -> list[Any]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def enough(d: Any) -> list[Any] | bool:
        items = d.find_elements(By.CSS_SELECTOR, "#scraps li.scrap")
        return items if len(items) == count else False

    found: list[Any] = WebDriverWait(driver, timeout).until(enough)
    return found


def _texts(driver: Any, selector: str) -> list[str]:
    """The text of every element `selector` finds, read in one script: the list is
    redrawn as its jobs move, and an element found before a redraw and read after it
    is stale (seen once on a loaded machine)."""
    texts: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText.trim())",
        selector,
    )
    return texts


def _titles(driver: Any) -> list[str]:
    return _texts(driver, "#scraps li.scrap a.open")


def test_two_analyses_in_flight_and_the_list_survives_a_reload(
    browser: object, web_slow_own: str
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver: Any = browser
    driver.get(web_slow_own + "/")
    _submit(driver, "First scrap", TEXT)
    _listed(driver, 1)
    # The first job runs for a minute (the slow gateway): the form takes another now.
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "submit").is_enabled())
    _submit(driver, "Second scrap", OTHER)
    _listed(driver, 2)
    assert _titles(driver) == ["Second scrap", "First scrap"]

    def both_in_flight(d: Any) -> bool:
        badges = _texts(d, "#scraps .scrap-status")
        return len(badges) == 2 and all(b in ("PENDING", "PROCESSING") for b in badges)

    WebDriverWait(driver, 30).until(both_in_flight)
    driver.refresh()
    _listed(driver, 2)
    assert _titles(driver) == ["Second scrap", "First scrap"]
    WebDriverWait(driver, 30).until(both_in_flight)


async def _apply_cards(database_url: str, job_service: str, job_ids: list[str]) -> None:
    """What the inbox does for each job's change: the handler, in a transaction."""
    engine = create_async_engine(database_url)
    try:
        async with AsyncJobsClient(job_service) as client:
            for job_id in job_ids:
                job = await client.wait(job_id, timeout=60)
                assert job.status == JobStatus.JOB_STATUS_COMPLETED, job
                job.ClearField("card_analysis_input")  # the feed carries no input
                async with engine.begin() as conn:
                    await apply_job_change(conn, job)
    finally:
        await engine.dispose()


def test_cards_and_related_scraps_after_a_reload(
    browser: object, web_ok_own: tuple[str, str, str]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, database_url, job_service = web_ok_own
    driver: Any = browser
    driver.get(base + "/")
    texts = {"Queues one": TEXT, "Bread": OTHER, "Queues two": TEXT + " Leases expire."}
    for title, text in texts.items():
        _submit(driver, title, text)
        WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "submit").is_enabled())
    _listed(driver, 3)
    scraps = httpx.get(f"{base}/api/scraps").json()["scraps"]
    ids = {item["title"]: item["scrapId"] for item in scraps}
    job_ids = [scrap_job_id(base, ids[title]) for title in texts]
    asyncio.run(_apply_cards(database_url, job_service, job_ids))

    driver.refresh()
    items = _listed(driver, 3)
    assert _titles(driver) == ["Queues two", "Bread", "Queues one"]

    def related_of(item: Any) -> list[str]:
        return [e.text for e in item.find_elements(By.CSS_SELECTOR, ".related li a")]

    WebDriverWait(driver, 20).until(
        lambda d: all(related_of(i) for i in d.find_elements(By.CSS_SELECTOR, "#scraps li.scrap"))
    )
    items = driver.find_elements(By.CSS_SELECTOR, "#scraps li.scrap")
    for item in items:
        summary = item.find_element(By.CSS_SELECTOR, ".card-summary").text
        assert summary and summary.split(".")[0] in " ".join(texts.values())
        assert item.find_elements(By.CSS_SELECTOR, ".card-tags li")
    by_title = {item.find_element(By.CSS_SELECTOR, "a.open").text: item for item in items}
    assert related_of(by_title["Queues one"])[0] == "Queues two"
    assert related_of(by_title["Queues two"])[0] == "Queues one"

    # The scrap's own view: its card from san-web, its related scraps.
    by_title["Bread"].find_element(By.CSS_SELECTOR, "a.open").click()
    assert wait_visible(driver, "scrap-title", timeout=10) == "Bread"
    assert wait_visible(driver, "summary", timeout=10).split(".")[0] in OTHER
    WebDriverWait(driver, 10).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#related li")) == 2
    )
    assert driver.current_url == f"{base}/?scrap={ids['Bread']}"
