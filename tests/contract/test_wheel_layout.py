"""The wheel `make dist` builds installs exactly one top-level package, `san_jobs`
(with its generated code and type information), so it cannot clash with a user's own
`clients` or `san`. Builds the wheel from this checkout (about 5 s: setuptools copies
the tree; no network, no build isolation)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_one_top_level_package(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("san_jobs-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert top == {"san_jobs"}, top
    for needed in (
        "san_jobs/py.typed",
        "san_jobs/client/__init__.py",
        "san_jobs/proto/jobs/v1/job_service_pb2.py",
        "san_jobs/proto/jobs/v1/job_service_pb2.pyi",
        "san_jobs/job_service/storage/migrations/env.py",
        "san_jobs/web/static/index.html",
    ):
        assert needed in names, needed
