"""Storage: the only code that writes SQL. `SqlJobStore` implements the JobStore port."""

from san_jobs.job_service.storage.engine import create_engine, normalize_url
from san_jobs.job_service.storage.migrate import migrate, migrate_sync
from san_jobs.job_service.storage.notify import PgChangeListener
from san_jobs.job_service.storage.repository import SqlJobStore

__all__ = [
    "PgChangeListener",
    "SqlJobStore",
    "create_engine",
    "migrate",
    "migrate_sync",
    "normalize_url",
]
