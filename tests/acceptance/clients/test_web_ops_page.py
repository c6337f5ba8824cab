"""The operator's page (/ops) in headless Chromium, in front of the real processes of
test_web_ops_api (jobs fail at once; TIL_GENERATION is paused): an operator sees the
counts change live, a failure group, the paused type; runs RetryFailed (the dry run's
count first, then confirm) and cancels a job. A viewer sees the page but its actions
are refused; a plain user is refused the page."""

from __future__ import annotations

from typing import Any

import pytest
from test_web_ops_api import (
    PASSWORDS,
    OpsWeb,
    fail_jobs,
    fail_paused_job,
    ops_stack,
    ops_web,
    pending_til,
)
from test_web_page import browser, wait_visible

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]

__all__ = ["browser", "ops_stack", "ops_web"]  # fixtures, used by name

LIVE_SECONDS = 15  # the page polls every 3 s


def open_ops_as(driver: Any, base: str, name: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver.delete_all_cookies()
    driver.get(base + "/login")
    driver.find_element(By.ID, "username").send_keys(name)
    driver.find_element(By.ID, "password").send_keys(PASSWORDS[name])
    driver.find_element(By.ID, "login").click()
    WebDriverWait(driver, 10).until(expected_conditions.url_to_be(base + "/"))
    driver.get(base + "/ops")


def text_when(driver: Any, element_id: str, check: Any, timeout: float = LIVE_SECONDS) -> str:
    """The element's text once ``check(text)`` holds (read again when a redraw replaced
    the element between the lookup and the read)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def read(d: Any) -> str | bool:
        text = str(d.find_element(By.ID, element_id).text)
        return text if check(text) else False

    wait = WebDriverWait(driver, timeout, ignored_exceptions=[StaleElementReferenceException])
    return str(wait.until(read))


def failed_cards(driver: Any) -> int:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    # The page redraws the counts table every few seconds: a cell found just before a
    # redraw is gone when read, so it is looked up again.
    for _ in range(20):
        cell = driver.find_element(By.CSS_SELECTOR, '#count-CARD_ANALYSIS td[data-status="FAILED"]')
        try:
            return int(cell.text)
        except StaleElementReferenceException:
            continue
    raise AssertionError("the counts table never held still long enough to be read")


def click_in_redrawn_table(driver: Any, xpath: str) -> None:
    """Click the element at `xpath` in a table the page redraws every few seconds (the
    failure groups): an element found just before a redraw is gone when clicked, so it
    is looked up again, as failed_cards reads its cell."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(20):
        try:
            driver.find_element(By.XPATH, xpath).click()
            return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"the table never held still long enough to click {xpath}")


def test_an_operator_watches_retries_and_cancels(browser: object, ops_web: OpsWeb) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver: Any = browser
    open_ops_as(driver, ops_web.base, "ops")
    assert wait_visible(driver, "who") == "ops (operator)"
    wait_visible(driver, "count-CARD_ANALYSIS")
    before = failed_cards(driver)

    # Counts change live: two more failures show without a reload.
    fail_jobs(ops_web.stack.address, 2, "ops-page")
    WebDriverWait(driver, LIVE_SECONDS).until(lambda d: failed_cards(d) >= before + 2)
    waiting = pending_til(ops_web.stack.address, "ops-page-til")
    oldest = text_when(driver, "oldest-pending", lambda t: t.endswith(")") and "old" in t)
    assert "created" in oldest
    paused = wait_visible(driver, "paused")
    assert "TIL_GENERATION" in paused and "RATE_LIMITED" in paused

    # A failure group, and its button fills the retry form.
    groups = text_when(driver, "failure-groups", lambda t: "UNAVAILABLE" in t)
    assert "AI gateway unavailable" in groups
    click_in_redrawn_table(driver, "//table[@id='failure-groups']//tr[td[2]='UNAVAILABLE']//button")
    assert (
        driver.find_element(By.ID, "retry-contains")
        .get_attribute("value")
        .startswith("AI gateway unavailable")
    )
    Select(driver.find_element(By.ID, "retry-type")).select_by_value("CARD_ANALYSIS")

    # The dry run's count first; nothing moves until the operator confirms.
    driver.find_element(By.ID, "retry-check").click()
    count = wait_visible(driver, "retry-count")
    matched = int(count.split()[0])
    assert matched >= 2 and count.endswith("Retry them?")
    assert not driver.find_element(By.ID, "retry-result").is_displayed()
    confirm = driver.find_element(By.ID, "retry-confirm")
    assert confirm.text == f"Retry {matched} jobs"
    confirm.click()
    result = wait_visible(driver, "retry-result")
    assert result.startswith("Moved ") and "back to PENDING" in result

    driver.find_element(By.ID, "cancel-job-id").send_keys(waiting)
    driver.find_element(By.ID, "cancel-submit").click()
    assert wait_visible(driver, "cancel-result") == f"Job {waiting} is CANCELLED."
    # Again: the job is terminal now, and the page says why it cannot be cancelled.
    driver.find_element(By.ID, "cancel-submit").click()
    assert "CANCELLED" in wait_visible(driver, "cancel-error")

    problems = [
        entry["message"]
        for entry in driver.get_log("browser")
        if "Content Security Policy" in entry["message"]
    ]
    assert problems == []


def test_a_viewer_looks_but_cannot_act_and_a_user_is_refused(
    browser: object, ops_web: OpsWeb
) -> None:
    from selenium.webdriver.common.by import By

    driver: Any = browser
    # An error message is text from outside (a model's answer): it stays text.
    hostile = '<img src=x onerror="document.body.dataset.owned=1">JSON Parse Error'
    fail_paused_job(f"sqlite+aiosqlite:///{ops_web.stack.log_dir / 'jobs.db'}", "xss", hostile)
    open_ops_as(driver, ops_web.base, "eve")
    assert "viewer" in wait_visible(driver, "viewer-note")
    assert hostile in text_when(driver, "failure-groups", lambda t: "MALFORMED_RESPONSE" in t)
    assert driver.find_elements(By.CSS_SELECTOR, "#failure-groups img") == []
    assert driver.execute_script("return document.body.dataset.owned") is None
    wait_visible(driver, "count-CARD_ANALYSIS")
    driver.find_element(By.ID, "cancel-job-id").send_keys("00000000-0000-4000-8000-000000000000")
    driver.find_element(By.ID, "cancel-submit").click()
    assert "needs the operator role" in wait_visible(driver, "cancel-error")
    driver.find_element(By.ID, "retry-check").click()
    assert "needs the operator role" in wait_visible(driver, "retry-error")

    open_ops_as(driver, ops_web.base, "pat")
    assert "Not allowed" in wait_visible(driver, "not-allowed")


def test_logging_in_from_ops_comes_back_to_ops(browser: object, ops_web: OpsWeb) -> None:
    """/ops without a session goes to the login page and, logged in, back to /ops (it
    used to land on /); the scraps page links to /ops; `next` leads nowhere else."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver: Any = browser
    base = ops_web.base

    def log_in_here() -> None:
        driver.find_element(By.ID, "username").send_keys("ops")
        driver.find_element(By.ID, "password").send_keys(PASSWORDS["ops"])
        driver.find_element(By.ID, "login").click()

    driver.delete_all_cookies()
    driver.get(base + "/ops")
    WebDriverWait(driver, 10).until(expected_conditions.url_to_be(base + "/login?next=/ops"))
    log_in_here()
    WebDriverWait(driver, 10).until(expected_conditions.url_to_be(base + "/ops"))
    wait_visible(driver, "count-CARD_ANALYSIS")

    driver.get(base + "/")
    driver.find_element(By.ID, "ops-link").click()
    WebDriverWait(driver, 10).until(expected_conditions.url_to_be(base + "/ops"))

    # Leave /ops first, for a page that polls nothing (cookies go per site, so not
    # about:blank): /ops's 3 s redraw, answered 401 once the cookies are gone, sends
    # the page to /login?next=/ops, and that navigation could win over the one below.
    driver.get(base + "/login")
    driver.delete_all_cookies()
    driver.get(base + "/login?next=//evil.example/ops")
    assert driver.current_url == base + "/login?next=//evil.example/ops"
    log_in_here()
    WebDriverWait(driver, 10).until(expected_conditions.url_to_be(base + "/"))
