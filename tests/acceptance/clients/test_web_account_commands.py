"""``san-web users passwd``, ``end-sessions`` and ``delete`` run (as real commands)
beside a real san-web process: the sessions they end are refused at once, on the next
request; and the password rule of ``users create`` (an account made before it still
logs in)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass

import httpx
import pytest
from conftest import create_web_user, start_web

from san_jobs.web._passwords import hash_password
from san_jobs.web._store import ScrapStore
from tests.support.processes import running

pytestmark = pytest.mark.acceptance

PASSWORDS = {"alice": "a long enough passphrase", "bob": "the other long passphrase"}
OLD_PASSWORD = "s3cret"


@dataclass
class Web:
    base: str
    database_url: str


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    folder = tmp_path_factory.mktemp("web-accounts")
    database_url = f"sqlite+aiosqlite:///{folder / 'web.db'}"
    for name, password in PASSWORDS.items():
        made = create_web_user(database_url, name, password)
        assert made.returncode == 0, made.stderr
    asyncio.run(_add_old_account(database_url))
    served = start_web(folder, "127.0.0.1:1", "--auth", "password", database_url=database_url)
    with running(served):
        yield Web(f"http://{served.address}", database_url)


async def _add_old_account(database_url: str) -> None:
    """A user whose password was set before the rule: 6 characters."""
    store = await ScrapStore.open(database_url)
    try:
        await store.add_user("old", hash_password(OLD_PASSWORD))
    finally:
        await store.close()


def _users(web: Web, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "san_jobs.web", "users", *argv, "--database-url", web.database_url],
        input=stdin, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _logged_in(web: Web, name: str, password: str) -> closing[httpx.Client]:
    """A client holding a new session of ``name`` (closed when the ``with`` ends)."""
    client = httpx.Client(base_url=web.base, timeout=30)
    answer = client.post("/api/session", json={"username": name, "password": password})
    assert answer.status_code == 200, answer.text
    return closing(client)


def test_create_refuses_a_short_password_or_one_holding_the_name(web: Web) -> None:
    short = create_web_user(web.database_url, "carol", "hunter2")
    assert short.returncode == 2 and "at least 12 characters" in short.stderr
    named = create_web_user(web.database_url, "carol", "carol is my name")
    assert named.returncode == 2 and "user name" in named.stderr
    # An account whose password was set before the rule still logs in.
    with _logged_in(web, "old", OLD_PASSWORD) as old:
        assert old.get("/api/session").json()["username"] == "old"


def test_end_sessions_logs_the_user_out_at_once(web: Web) -> None:
    with (
        _logged_in(web, "bob", PASSWORDS["bob"]) as first,
        _logged_in(web, "bob", PASSWORDS["bob"]) as second,
    ):
        assert first.get("/api/session").status_code == 200
        ended = _users(web, "end-sessions", "bob")
        assert ended.returncode == 0, ended.stderr
        assert first.get("/api/session").status_code == 401
        assert second.get("/api/session").status_code == 401
    # bob may log in again: nothing was locked.
    with _logged_in(web, "bob", PASSWORDS["bob"]) as again:
        assert again.get("/api/session").status_code == 200


def test_passwd_replaces_the_password_and_ends_the_old_sessions(web: Web) -> None:
    with _logged_in(web, "alice", PASSWORDS["alice"]) as session:
        changed = _users(web, "passwd", "alice", stdin="a brand new passphrase\n")
        assert changed.returncode == 0, changed.stderr
        assert session.get("/api/session").status_code == 401
    old = {"username": "alice", "password": PASSWORDS["alice"]}
    assert httpx.post(f"{web.base}/api/session", json=old).status_code == 401
    with _logged_in(web, "alice", "a brand new passphrase"):
        pass


def test_delete_removes_the_account_and_its_sessions(web: Web) -> None:
    made = create_web_user(web.database_url, "dave", "dave's long passphrase")
    assert made.returncode == 2  # holds the name
    assert create_web_user(web.database_url, "dave", "a fine long phrase").returncode == 0
    with _logged_in(web, "dave", "a fine long phrase") as session:
        scrap = session.post(
            "/api/scraps",
            json={"text": "dave's note"},
            headers={"x-csrf-token": session.get("/api/session").json()["csrfToken"]},
        )
        assert scrap.status_code == 202, scrap.text
        deleted = _users(web, "delete", "dave")
        assert deleted.returncode == 0, deleted.stderr
        assert deleted.stdout == "deleted user dave, 1 session and 1 scrap(s)\n"
        assert session.get("/api/session").status_code == 401
    gone = {"username": "dave", "password": "a fine long phrase"}
    assert httpx.post(f"{web.base}/api/session", json=gone).status_code == 401
    assert _users(web, "delete", "dave").returncode == 1
