"""What an AiGateway on the local backend imports at start: not the openai backend's
HTTP client. httpx brings 139 modules (its CLI's click, rich and pygments among them),
0.1 s of CPU that every start on the local or instant backend paid for nothing. (A
subprocess: the imports must be a fresh interpreter's.)"""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from san_jobs.ai_gateway.cli import load_settings
from san_jobs.ai_gateway.server import make_backend
make_backend(load_settings(["--backend", "{backend}"]))
print(sorted(m for m in ("httpx", "rich", "click") if m in sys.modules))
"""


def _loaded(backend: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(backend=backend)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return out.stdout.strip()


def test_the_local_backend_starts_without_the_http_client() -> None:
    assert _loaded("local") == "[]"


def test_the_openai_backend_still_gets_it() -> None:
    assert _loaded("openai") != "[]"
