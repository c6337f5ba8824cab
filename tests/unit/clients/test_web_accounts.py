"""san-web's accounts: the rule a new password must pass (and that an older, weaker one
still logs in), ``san-web users passwd``, ``end-sessions`` and ``delete`` on a real
SQLite database, and the sessions each of them ends."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from san_jobs.web._passwords import PasswordChecker, hash_password, password_problem
from san_jobs.web._store import Scrap, ScrapStore
from san_jobs.web._users_cli import users_main

GOOD = "a long enough passphrase"
T = TypeVar("T")


@pytest.mark.parametrize(
    ("password", "problem"),
    [("", "must not be empty"), ("short pass", "at least 12 characters"),
     ("x" * 1025, "at most 1024"), ("my name is Alice, ok?", "must not contain the user name"),
     ("I love san-web so much", "name of this service"),
     ("abababababababab", "at least 5 different characters"),
     ("Password1234", "most common passwords"), ("QWERTY123456", "most common passwords")],
)  # fmt: skip
def test_a_password_that_is_set_must_pass_the_rule(password: str, problem: str) -> None:
    found = password_problem(password, "alice")
    assert found is not None and problem in found


def test_good_passwords_pass_and_short_names_are_not_searched_for() -> None:
    assert password_problem(GOOD, "alice") is None
    assert password_problem("correct horse battery staple", "al") is None  # "al" is inside


async def test_an_account_made_before_the_rule_still_logs_in() -> None:
    old = hash_password("s3cret")  # 6 characters: refused today, not at login
    assert (await PasswordChecker().verify(old, "s3cret"))[0] is True


def _run(url: str, *argv: str, stdin: str = "", monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    return users_main([*argv, "--database-url", url], default_database_url=url)


def _with_store(url: str, act: Callable[[ScrapStore], Awaitable[T]]) -> T:
    """``act`` on the database at ``url`` (the CLI under test runs its own loop, so
    these tests are not coroutines)."""

    async def run() -> T:
        store = await ScrapStore.open(url)
        try:
            return await act(store)
        finally:
            await store.close()

    return asyncio.run(run())


def _sessions_of(url: str, name: str, count: int) -> list[str]:
    hashes = [f"{name}-{index}".ljust(64, "0") for index in range(count)]
    expires = datetime.now(UTC) + timedelta(hours=1)

    async def add(store: ScrapStore) -> None:
        for token_hash in hashes:
            await store.add_session(token_hash, name, "csrf", expires)

    _with_store(url, add)
    return hashes


def _live(url: str, hashes: list[str]) -> int:
    async def count(store: ScrapStore) -> int:
        return sum([await store.get_session(token_hash) is not None for token_hash in hashes])

    return _with_store(url, count)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"


def test_create_refuses_a_weak_password(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(url, "create", "alice", stdin="hunter2\n", monkeypatch=monkeypatch) == 2
    assert _run(url, "create", "alice", stdin="alice-in-wonderland", monkeypatch=monkeypatch) == 2
    assert _run(url, "create", "alice", stdin=GOOD, monkeypatch=monkeypatch) == 0


def test_passwd_sets_a_new_password_and_ends_every_session(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(url, "create", "alice", stdin=GOOD, monkeypatch=monkeypatch) == 0
    hashes = _sessions_of(url, "alice", 2)
    bob = _sessions_of(url, "bob", 1)  # no user: such a session is no session
    assert _live(url, hashes) == 2 and _live(url, bob) == 0
    assert _run(url, "passwd", "alice", stdin="too short", monkeypatch=monkeypatch) == 2
    assert _live(url, hashes) == 2  # a refused password changes nothing
    capsys.readouterr()
    new = "another long passphrase"
    assert _run(url, "passwd", "alice", stdin=new, monkeypatch=monkeypatch) == 0
    assert capsys.readouterr().out == "new password for alice; 2 sessions ended\n"
    assert _live(url, hashes) == 0
    stored = _with_store(url, lambda store: store.password_hash("alice"))
    checker = PasswordChecker()
    assert asyncio.run(checker.verify(stored, new))[0]
    assert not asyncio.run(checker.verify(stored, GOOD))[0]
    assert _run(url, "passwd", "nobody", stdin=new, monkeypatch=monkeypatch) == 1


def test_end_sessions_logs_a_user_out_everywhere(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(url, "create", "alice", stdin=GOOD, monkeypatch=monkeypatch) == 0
    assert _run(url, "create", "bob", stdin=GOOD, monkeypatch=monkeypatch) == 0
    alice, bob = _sessions_of(url, "alice", 3), _sessions_of(url, "bob", 1)
    capsys.readouterr()
    assert _run(url, "end-sessions", "alice", monkeypatch=monkeypatch) == 0
    assert capsys.readouterr().out == "3 sessions of alice ended\n"
    assert _live(url, alice) == 0 and _live(url, bob) == 1
    assert _run(url, "end-sessions", "nobody", monkeypatch=monkeypatch) == 1


def test_delete_removes_the_user_their_sessions_and_scraps(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(url, "create", "alice", stdin=GOOD, monkeypatch=monkeypatch) == 0
    assert _run(url, "create", "bob", stdin=GOOD, monkeypatch=monkeypatch) == 0
    sessions = _sessions_of(url, "alice", 1)

    async def save(store: ScrapStore) -> tuple[Scrap, Scrap]:
        mine = await store.add(url="", title="", text="alice's", owner="alice")
        await store.set_job(mine.id, "job-1", owner="alice")
        return mine, await store.add(url="", title="", text="bob's", owner="bob")

    mine, theirs = _with_store(url, save)
    capsys.readouterr()
    assert _run(url, "delete", "alice", monkeypatch=monkeypatch) == 0
    assert capsys.readouterr().out == "deleted user alice, 1 session and 1 scrap(s)\n"
    assert _live(url, sessions) == 0
    # A new alice starts with nothing of the old one's.
    assert _run(url, "create", "alice", stdin=GOOD, monkeypatch=monkeypatch) == 0
    assert _with_store(url, lambda store: store.get(mine.id)) is None
    assert not _with_store(url, lambda store: store.owns_job("job-1", "alice"))
    assert _with_store(url, lambda store: store.get(theirs.id, owner="bob")) is not None
    assert _run(url, "delete", "nobody", monkeypatch=monkeypatch) == 1
