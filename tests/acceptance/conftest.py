"""Acceptance tests start the real console scripts as processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.databases import create_temp_postgres_database, drop_database, require_postgres


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for job-service processes to share."""
    reason = require_postgres()
    if reason is not None:
        pytest.skip(reason)
    url = create_temp_postgres_database()
    yield url
    drop_database(url)
