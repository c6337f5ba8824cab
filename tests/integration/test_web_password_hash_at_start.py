"""The unknown-user argon2 hash is made when san-web's PasswordChecker is, not when the
module is imported: every san-web command imports it (`--help` too), and each would
pay 0.12 s of argon2 for nothing. (A subprocess: the import must be a fresh one.)"""

from __future__ import annotations

import subprocess
import sys


def test_the_unknown_user_hash_is_made_by_the_checker_not_at_import() -> None:
    probe = (
        "import san_jobs.web._passwords as p\n"
        "before = p._dummy_hash.cache_info().currsize\n"
        "p.PasswordChecker()\n"
        "print(before, p._dummy_hash.cache_info().currsize)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    # Made by the checker, before any login is checked: a miss costs what a wrong
    # password costs from the first login on.
    assert out.stdout.split() == ["0", "1"]
