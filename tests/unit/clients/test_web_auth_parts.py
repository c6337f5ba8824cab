"""The parts of san-web's login, one at a time: the failed-login throttle (with a clock
the test moves; more in test_web_login_backoff.py), passwords, the CSRF comparison, Host
names and the --auth default."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from san_jobs.web._auth import same_origin, token_hash, tokens_match
from san_jobs.web._auth_cli import resolve_auth_mode
from san_jobs.web._login_throttle import (
    MAX_REMEMBERED_PAIRS,
    LoginAttempt,
    LoginThrottle,
    Throttled,
)
from san_jobs.web._passwords import (
    PasswordChecker,
    hash_password,
    password_problem,
    username_problem,
)
from san_jobs.web._security_headers import AllowedHosts, default_allowed_hosts, host_name
from san_jobs.web._store import ScrapStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _fail(throttle: LoginThrottle, name: str, address: str) -> None:
    attempt = throttle.reserve(name, address)
    assert isinstance(attempt, LoginAttempt), attempt
    attempt.failed()


def test_a_pair_waits_after_its_free_failures_and_elsewhere_is_not_delayed() -> None:
    clock = Clock()
    throttle = LoginThrottle(free_failures=3, max_failures_per_address=100, clock=clock)
    for _ in range(3):
        _fail(throttle, "alice", "10.0.0.1")
        clock.now += 1
    # The last failure was at 1002: the next try from there waits until 1032.
    assert throttle.reserve("alice", "10.0.0.1") == Throttled(29)
    # The same name from elsewhere, another name from here: not delayed at all.
    assert isinstance(throttle.reserve("alice", "10.0.0.2"), LoginAttempt)
    assert isinstance(throttle.reserve("bob", "10.0.0.1"), LoginAttempt)
    clock.now = 1032.5
    assert isinstance(throttle.reserve("alice", "10.0.0.1"), LoginAttempt)


def test_an_address_is_limited_for_every_name() -> None:
    clock = Clock()
    throttle = LoginThrottle(free_failures=100, max_failures_per_address=2, window=60, clock=clock)
    _fail(throttle, "a", "10.0.0.9")
    _fail(throttle, "b", "10.0.0.9")
    assert throttle.reserve("c", "10.0.0.9") == Throttled(60)
    assert isinstance(throttle.reserve("c", "10.0.0.8"), LoginAttempt)


def test_success_resets_the_pair_and_takes_only_itself_off_the_address() -> None:
    throttle = LoginThrottle(free_failures=2, max_failures_per_address=3, clock=Clock())
    _fail(throttle, "alice", "10.0.0.1")
    _fail(throttle, "alice", "10.0.0.1")
    right = throttle.reserve("alice", "10.0.0.2")
    assert isinstance(right, LoginAttempt)
    right.succeeded()
    # alice from 10.0.0.1 still waits: a success elsewhere does not reset that pair.
    assert isinstance(throttle.reserve("alice", "10.0.0.1"), Throttled)
    ok = throttle.reserve("alice", "10.0.0.3")
    assert isinstance(ok, LoginAttempt)
    ok.succeeded()
    # 10.0.0.1 has two failures of its limit of 3: one more name, then it is refused.
    _fail(throttle, "carol", "10.0.0.1")
    assert isinstance(throttle.reserve("dave", "10.0.0.1"), Throttled)


def test_the_throttle_remembers_a_bounded_number_of_pairs() -> None:
    throttle = LoginThrottle(free_failures=1, max_failures_per_address=10**9, clock=Clock())
    for index in range(MAX_REMEMBERED_PAIRS + 50):
        _fail(throttle, f"user{index}", "10.0.0.1")
    assert len(throttle._pairs) == MAX_REMEMBERED_PAIRS
    assert isinstance(throttle.reserve("user0", "10.0.0.1"), LoginAttempt)  # forgotten
    assert isinstance(throttle.reserve(f"user{MAX_REMEMBERED_PAIRS + 49}", "10.0.0.1"), Throttled)


async def test_passwords_are_argon2id_hashes_checked_off_the_loop() -> None:
    stored = hash_password("s3cret")
    assert stored.startswith("$argon2id$") and "s3cret" not in stored
    checker = PasswordChecker()
    assert (await checker.verify(stored, "s3cret"))[0] is True
    assert (await checker.verify(stored, "S3cret"))[0] is False
    assert (await checker.verify(None, "s3cret"))[0] is False  # no such user
    assert (await checker.verify("not a hash", "s3cret"))[0] is False


def test_a_weaker_old_hash_is_replaced_on_login() -> None:
    from argon2 import PasswordHasher

    old = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash("s3cret")
    from san_jobs.web._passwords import _verify

    valid, rehash = _verify(old, "s3cret")
    assert valid and rehash is not None and rehash != old


@pytest.mark.parametrize(
    ("name", "ok"),
    [("alice", True), ("a.b-c_d@e", True), ("", False), ("-x", False), ("a b", False),
     ("x" * 65, False), ("\x1b[2J", False)],
)  # fmt: skip
def test_user_names(name: str, ok: bool) -> None:
    assert (username_problem(name) is None) is ok


def test_passwords_must_not_be_empty_or_huge() -> None:
    assert password_problem("") == "the password must not be empty"
    assert password_problem("x" * 5000) is not None
    assert password_problem("a long enough passphrase") is None


def test_csrf_tokens_compare_exactly() -> None:
    assert tokens_match("abc", "abc")
    assert not tokens_match("abd", "abc")
    assert not tokens_match(None, "abc")
    assert not tokens_match("", "abc")
    assert not tokens_match("é", "abc")  # non-ASCII does not raise
    assert token_hash("t") != token_hash("u") and len(token_hash("t")) == 64


def test_the_origin_must_be_the_one_the_client_reached() -> None:
    scope = {"type": "http", "scheme": "http", "headers": [(b"host", b"localhost:8000")]}
    assert same_origin(scope, "http://localhost:8000")
    assert not same_origin(scope, "https://localhost:8000")
    assert not same_origin(scope, "http://evil.example")
    assert not same_origin(scope, "null")


@pytest.mark.parametrize(
    ("header", "name"),
    [("localhost:8000", "localhost"), ("[::1]:8000", "::1"), ("Example.COM", "example.com"),
     ("[::1]", "::1"), ("10.0.0.1:80", "10.0.0.1")],
)  # fmt: skip
def test_host_names(header: str, name: str) -> None:
    assert host_name(header) == name


def test_allowed_hosts() -> None:
    hosts = AllowedHosts(lambda *_: None, allowed=[*default_allowed_hosts("10.1.2.3"), "*.corp"])  # type: ignore[arg-type]
    assert hosts.allows("10.1.2.3:8000") and hosts.allows("localhost:1")
    assert hosts.allows("[::1]:8000") and hosts.allows("web.corp")
    assert not hosts.allows("evil.example") and not hosts.allows(None)
    assert not hosts.allows("corp.evil")
    assert AllowedHosts(lambda *_: None, allowed=["*"]).allows("anything")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("chosen", "listen", "mode"),
    [(None, "127.0.0.1:8000", "off"), (None, "0.0.0.0:8000", "password"),
     (None, "[::]:8000", "password"), ("off", "0.0.0.0:8000", "off"),
     ("password", "127.0.0.1:8000", "password")],
)  # fmt: skip
def test_auth_defaults_to_password_beyond_loopback(
    chosen: str | None, listen: str, mode: str
) -> None:
    assert resolve_auth_mode(chosen, listen) == mode


async def test_a_scraps_table_from_before_logins_gets_its_owner_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as old:
        old.execute(
            "CREATE TABLE scraps (id VARCHAR(36) PRIMARY KEY, url TEXT NOT NULL, "
            "title TEXT NOT NULL, text TEXT NOT NULL, job_id VARCHAR(36), "
            "created_at DATETIME NOT NULL)"
        )
        old.execute("INSERT INTO scraps VALUES ('s1', '', '', 'old text', NULL, '2026-01-01')")
    store = await ScrapStore.open(f"sqlite+aiosqlite:///{path}")
    try:
        assert await store.get("s1") is not None  # --auth off still sees it
        assert await store.get("s1", owner="alice") is None  # no user owns it
        mine = await store.add(url="", title="", text="new", owner="alice")
        assert (await store.get(mine.id, owner="alice")) is not None
    finally:
        await store.close()
