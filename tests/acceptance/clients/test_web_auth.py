"""san-web behind a login (``--auth password``), over real HTTP to a real san-web
process in front of real job-service and ai-gateway processes; users made with the real
``san-web users create`` command; san-web's own database on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from conftest import Stack, _stop, create_web_user, scrap_job_id, start_web

from tests.support.databases import create_temp_postgres_database, drop_database, require_postgres

pytestmark = pytest.mark.acceptance

TEXT = "Sessions keep a user logged in. A CSRF token proves a write came from the page."
PASSWORDS = {"alice": "correct horse battery staple", "bob": "hunter2 but longer"}
SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}


create_user = create_web_user


@dataclass
class LoginWeb:
    base: str
    database_url: str


def _database(kind: str, folder: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{folder / 'web-auth.db'}"
        return
    reason = require_postgres()
    if reason is not None:
        pytest.skip(reason)
    url = create_temp_postgres_database(migrated=False)
    try:
        yield url
    finally:
        drop_database(url)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def web_login(
    request: pytest.FixtureRequest, ok_stack: Stack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoginWeb]:
    """san-web with --auth password and two users, alice and bob."""
    folder = tmp_path_factory.mktemp(f"web-auth-{request.param}")
    for database_url in _database(request.param, folder):
        for name, password in PASSWORDS.items():
            made = create_user(database_url, name, password)
            assert made.returncode == 0, made.stderr
        web = start_web(folder, ok_stack.address, "--auth", "password", database_url=database_url)
        try:
            yield LoginWeb(f"http://{web.address}", database_url)
        finally:
            _stop(web)


def log_in(base: str, name: str) -> tuple[httpx.Client, str]:
    """A client holding ``name``'s session cookie, and the session's CSRF token."""
    client = httpx.Client(base_url=base, timeout=30)
    answer = client.post("/api/session", json={"username": name, "password": PASSWORDS[name]})
    assert answer.status_code == 200, answer.text
    return client, answer.json()["csrfToken"]


def test_users_create_refuses_an_empty_password_a_bad_name_and_a_taken_one(
    web_login: LoginWeb,
) -> None:
    empty = create_user(web_login.database_url, "carol", "\n")
    assert empty.returncode == 2 and "must not be empty" in empty.stderr
    bad = create_user(web_login.database_url, "carol\x1b[2J", "secret")
    assert bad.returncode == 2 and "user name" in bad.stderr
    taken = create_user(web_login.database_url, "alice", "another password")
    assert taken.returncode == 1 and "already exists" in taken.stderr
    # alice's password is still the first one.
    log_in(web_login.base, "alice")[0].close()


def test_login_answers_a_csrf_token_and_sets_a_strict_cookie(web_login: LoginWeb) -> None:
    answer = httpx.post(
        f"{web_login.base}/api/session",
        json={"username": "alice", "password": PASSWORDS["alice"]},
    )
    assert answer.status_code == 200
    assert answer.json()["csrfToken"] and answer.json()["username"] == "alice"
    cookie = answer.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert cookie.startswith("san_session=")
    assert {"httponly", "samesite", "path", "max-age"} <= attributes
    assert "samesite=lax" in cookie.lower()
    assert "secure" not in attributes  # plain HTTP here; Secure comes with --tls-cert


@pytest.mark.parametrize(
    "credentials",
    [
        {"username": "alice", "password": "wrong"},
        {"username": "nobody", "password": "wrong"},
    ],
)
def test_a_wrong_password_and_an_unknown_user_get_the_same_401(
    web_login: LoginWeb, credentials: dict[str, str]
) -> None:
    answer = httpx.post(f"{web_login.base}/api/session", json=credentials)
    assert answer.status_code == 401
    assert answer.json()["error"]["message"] == "wrong user name or password"
    assert "set-cookie" not in answer.headers


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"username": "ali\\u0000ce", "password": "p"}', "username"),
        ('{"username": "\\ud800", "password": "p"}', "username"),
        ('{"username": "a\\nb", "password": "p"}', "username"),
        ('{"username": "alice", "password": "\\udfff"}', "password"),
    ],
)
def test_a_hostile_login_is_a_precise_422_and_the_server_keeps_serving(
    web_login: LoginWeb, body: str, field: str
) -> None:
    """JSON escapes let NUL and lone surrogates through; PostgreSQL cannot store or
    compare them, so they never reach the database."""
    answer = httpx.post(
        f"{web_login.base}/api/session",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert [v["field"] for v in error["fieldViolations"]] == [field]
    client, _csrf = log_in(web_login.base, "alice")
    client.close()


def test_without_a_session_the_api_is_401_and_the_page_redirects(web_login: LoginWeb) -> None:
    base = web_login.base
    for method, path in [
        ("GET", "/api/session"),
        ("GET", "/api/scraps/00000000-0000-4000-8000-000000000000"),
        ("GET", "/api/async-jobs/00000000-0000-4000-8000-000000000000"),
        ("DELETE", "/api/session"),
    ]:
        answer = httpx.request(method, base + path)
        assert answer.status_code == 401, (method, path)
        assert answer.json()["error"]["code"] == "UNAUTHENTICATED"
    created = httpx.post(f"{base}/api/scraps", json={"text": TEXT})
    assert created.status_code == 401
    page = httpx.get(f"{base}/")
    assert page.status_code == 303 and page.headers["location"] == "/login"
    login = httpx.get(f"{base}/login")
    assert login.status_code == 200 and 'id="login-form"' in login.text
    assert httpx.get(f"{base}/static/login.js").status_code == 200
    assert httpx.get(f"{base}/healthz").status_code == 200


def test_logout_ends_the_session_on_the_server(web_login: LoginWeb) -> None:
    client, csrf = log_in(web_login.base, "alice")
    with closing(client):
        stolen = client.cookies["san_session"]
        assert client.get("/api/session").json()["username"] == "alice"
        assert client.get("/").status_code == 200
        out = client.delete("/api/session", headers={"X-CSRF-Token": csrf})
        assert out.status_code == 200
        assert "san_session=" in out.headers["set-cookie"]  # cleared
        assert client.get("/api/session").status_code == 401
    # The old cookie value, replayed, is worth nothing: the session is gone.
    replay = httpx.get(f"{web_login.base}/api/session", cookies={"san_session": stolen})
    assert replay.status_code == 401


def test_every_write_needs_the_sessions_csrf_token(web_login: LoginWeb) -> None:
    alice, csrf = log_in(web_login.base, "alice")
    bob, bob_csrf = log_in(web_login.base, "bob")
    with closing(alice), closing(bob):
        for headers in ({}, {"X-CSRF-Token": "guess"}, {"X-CSRF-Token": bob_csrf}):
            refused = alice.post("/api/scraps", json={"text": TEXT}, headers=headers)
            assert refused.status_code == 403, headers
            assert refused.json()["error"]["code"] == "CSRF_TOKEN_MISSING"
        assert alice.delete("/api/session").status_code == 403
        # The right token from another site's page: the Origin gives it away.
        foreign = alice.post(
            "/api/scraps",
            json={"text": TEXT},
            headers={"X-CSRF-Token": csrf, "Origin": "https://evil.example"},
        )
        assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "CROSS_ORIGIN"
        own_origin = web_login.base
        created = alice.post(
            "/api/scraps",
            json={"text": TEXT},
            headers={"X-CSRF-Token": csrf, "Origin": own_origin},
        )
        assert created.status_code == 202, created.text
        assert alice.delete("/api/session", headers={"X-CSRF-Token": csrf}).status_code == 200


def test_another_users_scrap_and_job_are_404(web_login: LoginWeb) -> None:
    alice, alice_csrf = log_in(web_login.base, "alice")
    bob, bob_csrf = log_in(web_login.base, "bob")
    with closing(alice), closing(bob):
        created = alice.post(
            "/api/scraps", json={"text": TEXT}, headers={"X-CSRF-Token": alice_csrf}
        )
        assert created.status_code == 202
        scrap_id = created.json()["scrapId"]
        job_id = scrap_job_id(alice, scrap_id)
        # bob knows both ids and still finds nothing.
        assert bob.get(f"/api/scraps/{scrap_id}").status_code == 404
        assert bob.get(f"/api/async-jobs/{job_id}").status_code == 404
        assert bob.get(f"/api/async-jobs/{job_id}/events").status_code == 404
        write = {"X-CSRF-Token": bob_csrf}
        assert bob.post(f"/api/scraps/{scrap_id}/analyze", headers=write).status_code == 404
        assert bob.delete(f"/api/scraps/{scrap_id}", headers=write).status_code == 404
        # The answers are the same as for ids that never existed.
        missing = bob.get("/api/scraps/00000000-0000-4000-8000-000000000000")
        assert missing.json() == bob.get(f"/api/scraps/{scrap_id}").json()
        # alice sees her own, to the end of the job.
        assert alice.get(f"/api/scraps/{scrap_id}").json()["jobId"] == job_id
        with alice.stream("GET", f"/api/async-jobs/{job_id}/events") as events:
            assert events.status_code == 200
            data = [
                json.loads(line[6:]) for line in events.iter_lines() if line.startswith("data: ")
            ]
        assert data[-1] == {"jobId": job_id}
        assert alice.get(f"/api/async-jobs/{job_id}").json()["status"] == "COMPLETED"
        assert (
            alice.delete(
                f"/api/scraps/{scrap_id}", headers={"X-CSRF-Token": alice_csrf}
            ).status_code
            == 200
        )


def test_every_answer_carries_the_security_headers(web_login: LoginWeb) -> None:
    base = web_login.base
    answers = [
        httpx.get(f"{base}/login"),
        httpx.get(f"{base}/"),  # the redirect
        httpx.get(f"{base}/static/app.js"),
        httpx.get(f"{base}/api/session"),  # 401
        httpx.get(f"{base}/no/such/page"),
        httpx.get(f"{base}/healthz", headers={"Host": "evil.example"}),  # 421
        httpx.post(f"{base}/api/session", content=b"x", headers={"Content-Type": "text/plain"}),
    ]
    for answer in answers:
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers.get(name) == value, (answer.request.url, name)
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy


def test_no_inline_script_or_style_in_the_pages(web_login: LoginWeb) -> None:
    client, _ = log_in(web_login.base, "alice")
    with closing(client):
        for path in ("/", "/login"):
            page = client.get(path).text.lower()
            assert "<script>" not in page and "<style" not in page and " style=" not in page
            assert " onclick=" not in page and " onsubmit=" not in page


def test_a_foreign_host_name_is_refused(web_login: LoginWeb) -> None:
    base = web_login.base
    port = base.rsplit(":", 1)[1]
    refused = httpx.get(f"{base}/login", headers={"Host": f"evil.example:{port}"})
    assert refused.status_code == 421
    assert refused.json()["error"]["code"] == "MISDIRECTED_REQUEST"
    for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
        assert httpx.get(f"{base}/login", headers={"Host": host}).status_code == 200


@pytest.fixture(scope="module")
def web_throttled(ok_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A san-web of its own (the failures it counts must not lock out other tests)."""
    folder = tmp_path_factory.mktemp("web-throttled")
    database_url = f"sqlite+aiosqlite:///{folder / 'web.db'}"
    for name, password in PASSWORDS.items():
        assert create_user(database_url, name, password).returncode == 0
    web = start_web(
        folder, ok_stack.address, "--auth", "password", "--login-max-failures", "3",
        "--login-max-failures-per-address", "5", database_url=database_url,
    )  # fmt: skip
    yield f"http://{web.address}"
    _stop(web)


def _login(base: str, name: str, password: str) -> httpx.Response:
    return httpx.post(f"{base}/api/session", json={"username": name, "password": password})


def test_failed_logins_are_limited_per_user_and_per_address(web_throttled: str) -> None:
    base = web_throttled
    for _ in range(3):
        assert _login(base, "alice", "wrong").status_code == 401
    # The fourth try is refused before the password is even looked at: even the right one.
    locked = _login(base, "alice", PASSWORDS["alice"])
    assert locked.status_code == 429
    assert int(locked.headers["retry-after"]) >= 1
    assert locked.json()["error"]["code"] == "RESOURCE_EXHAUSTED"
    # Another user is not locked by alice's failures...
    assert _login(base, "bob", PASSWORDS["bob"]).status_code == 200
    # ...but this address has 3 failures: 2 more (for names that do not exist) reach
    # its limit of 5, and then every name is refused from here.
    assert _login(base, "mallory", "x").status_code == 401
    assert _login(base, "trent", "x").status_code == 401
    refused = _login(base, "bob", PASSWORDS["bob"])
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
