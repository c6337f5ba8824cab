"""san-web users' roles (user, viewer, operator) in its store and in ``san-web users``:
a users table made before roles existed gets the column, every old user a plain
``user``, on SQLite and PostgreSQL; set-role changes a role or says the user is
unknown."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from san_jobs.web._store import ScrapStore
from san_jobs.web._users_cli import users_main
from tests.support.databases import (
    create_temp_postgres_database_async,
    drop_database_async,
    require_postgres,
)

OLD_USERS = (
    "CREATE TABLE users (name VARCHAR(64) PRIMARY KEY, password_hash TEXT NOT NULL, "
    "created_at TIMESTAMP WITH TIME ZONE NOT NULL)"
)
OLD_ROW = "INSERT INTO users VALUES ('old', 'hash', '2026-01-01 00:00:00+00')"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def old_database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A san-web database whose users table predates roles, with one user, ``old``."""
    if request.param == "sqlite":
        path = tmp_path / "old.db"
        with sqlite3.connect(path) as old:
            old.execute(OLD_USERS.replace("TIMESTAMP WITH TIME ZONE", "DATETIME"))
            old.execute(OLD_ROW)
        yield f"sqlite+aiosqlite:///{path}"
        return
    reason = require_postgres()
    if reason is not None:
        pytest.skip(reason)
    url = await create_temp_postgres_database_async(migrated=False)
    engine = create_async_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.execute(sa.text(OLD_USERS))
            await connection.execute(sa.text(OLD_ROW))
        await engine.dispose()
        yield url
    finally:
        await engine.dispose()
        await drop_database_async(url)


async def test_an_old_users_table_gets_roles_and_old_users_are_plain_users(
    old_database: str,
) -> None:
    store = await ScrapStore.open(old_database)
    try:
        assert await store.role("old") == "user"
        await store.add_user("ops", "hash", "operator")
        await store.add_user("someone", "hash")
        assert await store.role("ops") == "operator"
        assert await store.role("someone") == "user"
        assert await store.set_role("old", "viewer")
        assert await store.role("old") == "viewer"
        assert not await store.set_role("nobody", "viewer")
        assert await store.role("nobody") is None
    finally:
        await store.close()
    # Opening it again (the column exists now) changes nothing.
    store = await ScrapStore.open(old_database)
    try:
        assert await store.role("old") == "viewer"
    finally:
        await store.close()


def test_set_role_of_an_unknown_user_or_a_bad_role(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"
    assert users_main(["set-role", "nobody", "viewer", "--database-url", url],
                      default_database_url=url) == 1  # fmt: skip
    assert capsys.readouterr().err == "san-web users set-role: error: no user 'nobody'\n"
    with pytest.raises(SystemExit) as refused:
        users_main(["set-role", "nobody", "admin"], default_database_url=url)
    assert refused.value.code == 2
    assert "invalid choice: 'admin'" in capsys.readouterr().err
