"""SQLite: an acknowledged write is on disk (synchronous=FULL in WAL mode), and the
database files are private (0600 in a 0700 folder) whatever the umask."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from _storage_support import enqueue
from sqlalchemy import text

from san_jobs.job_service.server import prepare_database
from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.repository import SqlJobStore
from san_jobs.shared.sqlite_files import prepare_sqlite_url
from san_jobs.web._store import ScrapStore

# sqlite3's numbers for PRAGMA synchronous.
SYNCHRONOUS_FULL = 2


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The umask most services run with (022): files would be 0644 by default."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


async def test_a_live_connection_runs_wal_with_synchronous_full(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}")
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
            assert (await conn.execute(text("PRAGMA synchronous"))).scalar() == SYNCHRONOUS_FULL
    finally:
        await engine.dispose()


@pytest.mark.usefixtures("usual_umask")
async def test_a_fresh_database_is_private(tmp_path: Path) -> None:
    folder = tmp_path / "new" / "var"
    database = folder / "jobs.db"
    url = f"sqlite+aiosqlite:///{database}"
    # What `job-service` and `job-service migrate` do first.
    await prepare_database(JobServiceSettings(database_url=url))
    store = SqlJobStore(url, instance_id="test")
    try:
        await enqueue(store)
        # While the store is open, SQLite keeps its -wal and -shm files beside it.
        files = [database, Path(f"{database}-wal"), Path(f"{database}-shm")]
        assert {path.name: _mode(path) for path in files} == {path.name: 0o600 for path in files}
        assert _mode(folder) == 0o700
    finally:
        await store.close()


@pytest.mark.usefixtures("usual_umask")
def test_an_existing_open_folder_is_left_alone_and_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    url = f"sqlite+aiosqlite:///{folder / 'jobs.db'}"
    with caplog.at_level(logging.WARNING, logger="san_shared.sqlite_files"):
        for _ in range(2):
            prepare_sqlite_url(url)
    assert _mode(folder) == 0o755
    assert _mode(folder / "jobs.db") == 0o600
    warnings = [r.getMessage() for r in caplog.records if str(folder) in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "0755" in warnings[0] and f"chmod 700 {folder}" in warnings[0]


@pytest.mark.usefixtures("usual_umask")
def test_an_existing_open_file_is_left_alone_and_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database = tmp_path / "old.db"
    database.touch(mode=0o644)
    os.chmod(database, 0o644)
    with caplog.at_level(logging.WARNING, logger="san_shared.sqlite_files"):
        prepare_sqlite_url(f"sqlite+aiosqlite:///{database}")
    assert _mode(database) == 0o644
    assert any(f"chmod 600 {database}" in r.getMessage() for r in caplog.records)


@pytest.mark.usefixtures("usual_umask")
async def test_san_web_scraps_database_is_private(tmp_path: Path) -> None:
    folder = tmp_path / "web" / "var"
    store = await ScrapStore.open(f"sqlite+aiosqlite:///{folder / 'san-web.db'}")
    try:
        await store.add(url="", title="t", text="x")
        assert _mode(folder) == 0o700
        assert _mode(folder / "san-web.db") == 0o600
    finally:
        await store.close()
