"""Whether the tests run under CI, and what a missing requirement means there.

Locally a test whose tool or server is missing (buf, Chromium, PostgreSQL) is skipped;
under CI it fails, so a green run never hides tests that did not run. CI systems spell
the flag differently (GitHub and GitLab `true`, others `1`, people `yes` or `True`):
every true-ish spelling counts, here and only here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NoReturn

import pytest

# The spellings of "on" that environment flags use; compared without case or spaces.
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})


def running_in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """True when `CI` (in `environ`, default os.environ) is a true-ish word."""
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.strip().lower() in TRUE_WORDS


def skip_or_fail_in_ci(reason: str) -> NoReturn:
    """Skip the test for `reason`; under CI, fail it instead."""
    if running_in_ci():
        pytest.fail(f"{reason} (CI requires it)", pytrace=False)
    pytest.skip(reason)
