"""The unknown-user argon2 hash is made when san-web's PasswordChecker is, not when the
module is imported: every san-web command imports it (`--help` too), and each would
pay 0.12 s of argon2 for nothing; and only by an app whose users log in (--auth
password): one without logins never verifies a password. (Subprocesses: the import
must be a fresh one.)"""

from __future__ import annotations

import subprocess
import sys

import pytest


def _hashes_made(code: str) -> list[str]:
    probe = (
        "import san_jobs.web._passwords as p\n"
        "before = p._dummy_hash.cache_info().currsize\n"
        f"{code}\n"
        "print(before, p._dummy_hash.cache_info().currsize)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return out.stdout.split()


def test_the_unknown_user_hash_is_made_by_the_checker_not_at_import() -> None:
    # Made by the checker, before any login is checked: a miss costs what a wrong
    # password costs from the first login on.
    assert _hashes_made("p.PasswordChecker()") == ["0", "1"]


@pytest.mark.parametrize(("mode", "made"), [("password", "1"), ("off", "0")])
def test_only_an_app_with_logins_makes_it(mode: str, made: str) -> None:
    code = (
        "from san_jobs.web.app import create_app\n"
        "from san_jobs.web._auth import AuthSettings\n"
        "create_app(job_service='127.0.0.1:1', database_url='sqlite+aiosqlite://',"
        f" auth=AuthSettings(mode={mode!r}))"
    )
    assert _hashes_made(code) == ["0", made]
