"""The san page in headless Chromium, used as a person would: paste, submit, watch.

Chromium is Debian's `chromium` and `chromium-driver`, driven with Selenium through
/usr/bin/chromedriver (nothing is downloaded). Without them the tests are skipped
locally, and fail under CI (tests.support.ci).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Stack, _stop, chromium_path, create_web_user, start_web

from tests.support.ci import skip_or_fail_in_ci

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]

TEXT = (
    "Background jobs keep web requests fast. A job queue stores each job before any "
    "worker sees it. Workers claim jobs with a lease, and failures are written down "
    "with their reason so operators can retry them."
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1200,900",
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    binary, driver_path = chromium_path(), shutil.which("chromedriver")
    if binary is None or driver_path is None:
        skip_or_fail_in_ci(
            "Chromium or chromedriver is missing (apt-get install chromium chromium-driver)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in FLAGS:
        options.add_argument(flag)
    profile: Path = tmp_path_factory.mktemp("chromium-profile")
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def submit_text(driver: object, base: str, text: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(base + "/")  # type: ignore[attr-defined]
    driver.find_element(By.ID, "title").send_keys("Background jobs")  # type: ignore[attr-defined]
    driver.find_element(By.ID, "text").send_keys(text)  # type: ignore[attr-defined]
    driver.find_element(By.ID, "submit").click()  # type: ignore[attr-defined]


def wait_visible(driver: Any, element_id: str, timeout: float = 30) -> str:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    element = WebDriverWait(driver, timeout).until(
        expected_conditions.visibility_of_element_located((By.ID, element_id))
    )
    return str(element.text)


def test_paste_submit_and_see_summary(browser: object, web_ok: str) -> None:
    from selenium.webdriver.common.by import By

    submit_text(browser, web_ok, TEXT)
    summary = wait_visible(browser, "summary")
    assert summary and summary.split(".")[0] in TEXT  # an extractive summary of the text
    status = browser.find_element(By.ID, "status").text  # type: ignore[attr-defined]
    assert status == "COMPLETED"
    tags = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#tags li")]  # type: ignore[attr-defined]
    assert tags and all(tags)
    timeline = browser.find_element(By.ID, "timeline").text  # type: ignore[attr-defined]
    assert "COMPLETED" in timeline
    assert not browser.find_element(By.ID, "failure").is_displayed()  # type: ignore[attr-defined]


def test_failure_is_shown_readably(browser: object, web_failing: str) -> None:
    from selenium.webdriver.common.by import By

    submit_text(browser, web_failing, TEXT)
    error = wait_visible(browser, "error")
    assert error.startswith("AI gateway unavailable")
    assert "after 1 attempt" in error
    assert browser.find_element(By.ID, "status").text == "FAILED"  # type: ignore[attr-defined]
    assert not browser.find_element(By.ID, "result").is_displayed()  # type: ignore[attr-defined]


def test_blank_text_is_refused_on_the_page(browser: object, web_ok: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(web_ok + "/")  # type: ignore[attr-defined]
    # Bypass the browser's own `required` check to see the server's answer shown.
    browser.execute_script("document.getElementById('text').removeAttribute('required')")  # type: ignore[attr-defined]
    browser.find_element(By.ID, "text").send_keys("   ")  # type: ignore[attr-defined]
    browser.find_element(By.ID, "submit").click()  # type: ignore[attr-defined]
    message = wait_visible(browser, "form-error", timeout=10)
    assert "text is required" in message


@pytest.fixture(scope="module")
def web_with_login(ok_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """san-web with --auth password and one user, page / a 12-character-plus password."""
    folder = tmp_path_factory.mktemp("web-page-login")
    database_url = f"sqlite+aiosqlite:///{folder / 'web.db'}"
    made = create_web_user(database_url, "page", "lemon tree at sunrise")
    assert made.returncode == 0, made.stderr
    web = start_web(folder, ok_stack.address, "--auth", "password", database_url=database_url)
    yield f"http://{web.address}"
    _stop(web)


def test_log_in_submit_see_the_result_and_log_out(browser: object, web_with_login: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver: Any = browser
    driver.get(web_with_login + "/")
    WebDriverWait(driver, 10).until(expected_conditions.url_to_be(web_with_login + "/login"))
    driver.find_element(By.ID, "username").send_keys("page")
    driver.find_element(By.ID, "password").send_keys("wrong")
    driver.find_element(By.ID, "login").click()
    assert "wrong user name or password" in wait_visible(driver, "login-error", timeout=10)
    driver.find_element(By.ID, "password").clear()
    driver.find_element(By.ID, "password").send_keys("lemon tree at sunrise")
    driver.find_element(By.ID, "login").click()
    assert wait_visible(driver, "who", timeout=10).startswith("page")
    assert not driver.find_element(By.ID, "no-login").is_displayed()

    driver.find_element(By.ID, "title").send_keys("Background jobs")
    driver.find_element(By.ID, "text").send_keys(TEXT)
    driver.find_element(By.ID, "submit").click()
    summary = wait_visible(driver, "summary")
    assert summary and summary.split(".")[0] in TEXT
    assert driver.find_element(By.ID, "status").text == "COMPLETED"
    # The page ran under its Content-Security-Policy without breaking it.
    problems = [
        entry["message"]
        for entry in driver.get_log("browser")
        if "Content Security Policy" in entry["message"]
    ]
    assert problems == []

    driver.find_element(By.ID, "logout").click()
    WebDriverWait(driver, 10).until(expected_conditions.url_to_be(web_with_login + "/login"))
    driver.get(web_with_login + "/")
    WebDriverWait(driver, 10).until(expected_conditions.url_to_be(web_with_login + "/login"))


def test_without_login_the_page_says_so(browser: object, web_ok: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(web_ok + "/")  # type: ignore[attr-defined]
    note = wait_visible(browser, "no-login", timeout=10)
    assert "no login" in note
    assert not browser.find_element(By.ID, "who").is_displayed()  # type: ignore[attr-defined]
