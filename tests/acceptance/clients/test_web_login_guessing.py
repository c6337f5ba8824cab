"""Password guessing against a real san-web process (``--auth password``, real HTTP,
users made with the real ``san-web users create``): guesses sent at once are throttled
like guesses sent in turn, a guesser at one address cannot lock a user out at another,
``X-Forwarded-For`` is believed only from ``--trusted-proxies``, and a JSON number too
long for Python is a 422. Other client addresses are real: the tests bind their sockets
to 127.0.0.2, which Linux routes to loopback like 127.0.0.1.

JobService is not needed here (logins and a scrap's save are san-web's own), so
san-web is pointed at a port where nothing listens."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import create_web_user, start_web

from tests.support.processes import RunningService, running

pytestmark = pytest.mark.acceptance

PASSWORDS = {
    "alice": "a long enough passphrase",
    "ops": "the operator's passphrase",
    "carol": "carry on, wayward son",
}
NOWHERE = "127.0.0.1:1"
ELSEWHERE = "127.0.0.2"  # another client address on this machine's loopback


def _start(folder: Path, *flags: str) -> RunningService:
    database_url = f"sqlite+aiosqlite:///{folder / 'web.db'}"
    for name, password in PASSWORDS.items():
        made = create_web_user(database_url, name, password)
        assert made.returncode == 0, made.stderr
    return start_web(folder, NOWHERE, "--auth", "password", *flags, database_url=database_url)


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    with running(_start(tmp_path_factory.mktemp("web-guessing"))) as served:
        yield served


def _client(web: RunningService, local_address: str | None = None) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=local_address)
    return httpx.Client(base_url=f"http://{web.address}", transport=transport, timeout=30)


def _login(client: httpx.Client, name: str, password: str, **headers: str) -> httpx.Response:
    body = {"username": name, "password": password}
    return client.post("/api/session", json=body, headers=headers)


async def _at_once(web: RunningService, name: str, count: int) -> Counter[int]:
    """``count`` wrong passwords for ``name``, all sent before any is answered."""
    async with httpx.AsyncClient(
        base_url=f"http://{web.address}",
        timeout=60,
        limits=httpx.Limits(max_connections=count),
    ) as client:
        answers = await asyncio.gather(
            *(
                client.post("/api/session", json={"username": name, "password": f"wrong {i}"})
                for i in range(count)
            )
        )
    return Counter(answer.status_code for answer in answers)


def test_guesses_sent_at_once_are_throttled_like_guesses_in_turn(web: RunningService) -> None:
    # 18 connections: under the 20 one address may hold (--max-connections-per-address).
    statuses = asyncio.run(_at_once(web, "alice", 18))
    print(f"18 wrong passwords at once: {dict(statuses)}")
    # 5 free failures per (name, address); every other guess is refused unverified.
    assert statuses == Counter({401: 5, 429: 13})
    with _client(web) as client:
        locked = _login(client, "alice", PASSWORDS["alice"])
    assert locked.status_code == 429 and int(locked.headers["retry-after"]) >= 1


def test_a_guesser_elsewhere_cannot_lock_the_operator_out(web: RunningService) -> None:
    with _client(web, local_address=ELSEWHERE) as guesser:
        answers = [_login(guesser, "ops", f"guess {i}").status_code for i in range(8)]
    assert answers == [401] * 5 + [429] * 3
    with _client(web) as operator:
        assert _login(operator, "ops", PASSWORDS["ops"]).status_code == 200


def test_a_json_number_too_long_for_python_is_422(web: RunningService) -> None:
    digits = "9" * 5000  # Python refuses int() of more than 4,300 digits
    with _client(web) as client:
        login = client.post(
            "/api/session",
            content=f'{{"username": {digits}, "password": "x"}}',
            headers={"content-type": "application/json"},
        )
        assert login.status_code == 422, login.text
        assert login.json()["error"]["code"] == "INVALID_ARGUMENT"
        logged_in = _login(client, "carol", PASSWORDS["carol"])
        assert logged_in.status_code == 200, logged_in.text
        scrap = client.post(
            "/api/scraps",
            content=f'{{"text": {digits}}}',
            headers={
                "content-type": "application/json",
                "x-csrf-token": logged_in.json()["csrfToken"],
            },
        )
    assert scrap.status_code == 422, scrap.text
    assert scrap.json()["error"]["fieldViolations"] == [
        {"field": "body", "description": "is not valid JSON"}
    ]
    assert httpx.get(f"http://{web.address}/healthz").status_code == 200


def _failed_login_addresses(web: RunningService) -> list[str]:
    return re.findall(r"failed login for '[^']*' from (\S+)", web.log())


def test_x_forwarded_for_is_ignored_without_trusted_proxies(tmp_path: Path) -> None:
    with running(_start(tmp_path, "--login-max-failures-per-address", "3")) as web:
        with _client(web) as client:
            answers = [
                _login(client, f"nobody{i}", "x", **{"x-forwarded-for": f"10.9.0.{i}"}).status_code
                for i in range(4)
            ]
        # One address for all four: its limit of 3 holds, whatever the header says.
        assert answers == [401, 401, 401, 429]
        assert set(_failed_login_addresses(web)) == {"127.0.0.1"}


def test_x_forwarded_for_from_a_trusted_proxy_names_the_client(tmp_path: Path) -> None:
    flags = ["--login-max-failures-per-address", "3", "--trusted-proxies", "127.0.0.1"]
    with running(_start(tmp_path, *flags)) as web:
        with _client(web) as proxy:
            answers = [
                _login(proxy, f"nobody{i}", "x", **{"x-forwarded-for": f"10.9.0.{i}"}).status_code
                for i in range(4)
            ]
        assert answers == [401] * 4  # four clients, one failure each
        assert _failed_login_addresses(web) == [f"10.9.0.{i}" for i in range(4)]
        # A client that is not the named proxy cannot pick its address.
        with _client(web, local_address=ELSEWHERE) as other:
            for _ in range(3):
                _login(other, "nobody", "x", **{"x-forwarded-for": "10.9.9.9"})
        assert _failed_login_addresses(web)[-3:] == [ELSEWHERE] * 3
