"""Which database schemas this code may run on, and what it says when it may not.

The revisions form one line (0001 ... head). Code at revision C (its head) runs on a
database at revision D when:

- D == C: the schema it was written for;
- D is older: it must be migrated first (`job-service migrate`); a start may do that
  itself when the pending revisions are all *expand-only* (below), since instances of
  D still running keep working on the result;
- D is newer (C does not know D): only if the database says so. Each revision has a
  `compatible_from`: the oldest revision whose code can run on its schema. The runner
  writes the current revision's into the one-row table `schema_compatibility` in the
  same transaction as each revision (alembic's on_version_apply), so old code reads it
  from the database, and runs when `compatible_from` is C or older.

A migration declares `expand_only = True` at module level when code of the revision
before it runs unchanged on its schema (it adds a nullable column, an index, a table,
a trigger that keeps its own table). compatible_from(R) is then compatible_from of
R's parent; otherwise R itself (code older than R refuses to start on it). Undeclared
means not expand-only: the safe side.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import URL, inspect, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from san_jobs.job_service.domain.errors import JobServiceError
from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.tables import schema_compatibility

if TYPE_CHECKING:
    from alembic.migration import MigrationContext, MigrationInfo

log = logging.getLogger("job_service.schema")

DEPLOY_DOCS = "see README 'Deploying a new version'"


class SchemaMismatch(JobServiceError):
    """This code will not run on (or migrate) the database's schema; the message is one
    line saying why and what to do."""


# Every revision this code knows, oldest first, each with whether its migration
# declares `expand_only`. Written here rather than read from the migration scripts, so
# that a start on a database already at this code's head imports neither alembic nor
# the scripts (about a fifth of a second of every start).
# tests/integration/storage/test_migrations.py checks it against the scripts: a new
# migration adds its line here.
REVISIONS: tuple[tuple[str, bool], ...] = (
    ("0001", False),
    ("0002", False),
    ("0003", True),
    ("0004", False),
    ("0005", False),
    ("0006", True),
    ("0007", True),
    ("0008", True),
    ("0009", True),
    ("0010", True),
    ("0011", True),
    ("0012", True),
    ("0013", True),
    ("0014", True),
    ("0015", True),
    ("0016", True),
    ("0017", True),
    ("0018", True),
    ("0019", True),
    ("0020", True),
)


def code_revisions() -> tuple[str, ...]:
    """Every revision this code knows, oldest first; the last is its head."""
    return tuple(revision for revision, _ in REVISIONS)


def code_head() -> str:
    return REVISIONS[-1][0]


def compatible_from(revision: str) -> str:
    """The oldest revision whose code can run on the schema of `revision` (one this
    code knows): back past every expand-only revision to the first that is not."""
    order = code_revisions()
    index = order.index(revision)
    while index > 0 and REVISIONS[index][1]:
        index -= 1
    return order[index]


class Verdict(enum.Enum):
    EMPTY = "empty"  # nothing migrated yet
    CURRENT = "current"
    OLDER = "older"
    NEWER_COMPATIBLE = "newer, compatible"
    NEWER_INCOMPATIBLE = "newer, incompatible"


@dataclass(frozen=True)
class DatabaseSchema:
    """What the database says of its schema: alembic's revision(s), and the row of
    schema_compatibility (None when the table or row is missing)."""

    revisions: tuple[str, ...]
    recorded_revision: str | None = None
    recorded_compatible_from: str | None = None


@dataclass(frozen=True)
class Compatibility:
    verdict: Verdict
    database: str | None
    code: str
    reason: str = ""

    @property
    def may_run(self) -> bool:
        return self.verdict in (Verdict.CURRENT, Verdict.NEWER_COMPATIBLE)

    @property
    def start_may_migrate(self) -> bool:
        """Whether migrating to this code's head keeps instances of the database's
        revision working (every pending revision expand-only), so a start may do it."""
        if self.verdict is Verdict.EMPTY:
            return True
        if self.verdict is not Verdict.OLDER or self.database is None:
            return False
        order = code_revisions()
        return order.index(compatible_from(self.code)) <= order.index(self.database)

    def refusal(self) -> str:
        """One line saying why this code will not start on the database, and what to do."""
        if self.verdict is Verdict.EMPTY:
            return (
                f"the database has no schema yet: run `job-service migrate` first ({DEPLOY_DOCS})"
            )
        if self.verdict is Verdict.OLDER:
            return (
                f"the database schema is at revision {self.database}, older than this "
                f"job-service's {self.code}: run `job-service migrate` first{self.reason} "
                f"({DEPLOY_DOCS})"
            )
        return (
            f"the database schema is at revision {self.database}, newer than this "
            f"job-service knows (its newest is {self.code}), and {self.reason}: start the "
            f"newer job-service instead ({DEPLOY_DOCS})"
        )


def judge(schema: DatabaseSchema) -> Compatibility:
    """Whether code at this code's head may run on `schema`."""
    order = code_revisions()
    head = order[-1]
    if not schema.revisions:
        return Compatibility(Verdict.EMPTY, None, head)
    if len(schema.revisions) > 1:
        return Compatibility(
            Verdict.NEWER_INCOMPATIBLE,
            ",".join(schema.revisions),
            head,
            "it has several heads (a branched migration history)",
        )
    (revision,) = schema.revisions
    if revision == head:
        return Compatibility(Verdict.CURRENT, revision, head)
    if revision in order:
        return Compatibility(Verdict.OLDER, revision, head)
    if schema.recorded_revision != revision or schema.recorded_compatible_from is None:
        return Compatibility(
            Verdict.NEWER_INCOMPATIBLE,
            revision,
            head,
            "it does not record which versions can run on it",
        )
    oldest = schema.recorded_compatible_from
    if oldest in order:
        return Compatibility(Verdict.NEWER_COMPATIBLE, revision, head)
    return Compatibility(
        Verdict.NEWER_INCOMPATIBLE,
        revision,
        head,
        f"it needs code of revision {oldest} or newer",
    )


def read_schema(connection: Connection) -> DatabaseSchema:
    """The database's schema state, on a sync connection (inside run_sync)."""
    # Read directly: MigrationContext would log alembic's set-up lines at every start.
    tables = inspect(connection)
    revisions: tuple[str, ...] = ()
    if tables.has_table("alembic_version"):
        found = connection.execute(text("SELECT version_num FROM alembic_version"))
        revisions = tuple(sorted(str(v) for v in found.scalars()))
    if not tables.has_table(schema_compatibility.name):
        return DatabaseSchema(revisions)
    row = connection.execute(
        select(schema_compatibility.c.revision, schema_compatibility.c.compatible_from)
    ).first()
    if row is None:
        return DatabaseSchema(revisions)
    return DatabaseSchema(revisions, row.revision, row.compatible_from)


async def read_database_schema(database_url: str | URL) -> DatabaseSchema:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(read_schema)
    finally:
        await engine.dispose()


def record_compatibility(connection: Connection, revision: str | None) -> None:
    """Make schema_compatibility say `revision` (None: the database is back to empty)
    and its compatible_from; in the caller's transaction."""
    schema_compatibility.create(connection, checkfirst=True)
    if revision is None:
        connection.execute(schema_compatibility.delete())
        return
    values = {"id": 1, "revision": revision, "compatible_from": compatible_from(revision)}
    insert = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
    statement = insert(schema_compatibility).values(values)
    connection.execute(
        statement.on_conflict_do_update(
            index_elements=[schema_compatibility.c.id],
            set_={"revision": revision, "compatible_from": values["compatible_from"]},
        )
    )


def on_version_apply(
    ctx: MigrationContext,
    step: MigrationInfo,
    heads: Collection[Any],
    run_args: Mapping[str, Any],
) -> None:
    """alembic's on_version_apply hook: after each revision (up or down), before its
    commit; `heads` are the database's revisions once it is applied."""
    assert ctx.connection is not None
    record_compatibility(ctx.connection, str(next(iter(heads))) if len(heads) == 1 else None)


async def prepare_schema(database_url: str | URL, *, migrate_on_start: bool) -> Compatibility:
    """At a start: run on the database's schema, migrate it first when that is safe
    for instances already running on it (and allowed), or raise SchemaMismatch."""
    from san_jobs.job_service.storage.migrate import migrate

    verdict = judge(await read_database_schema(database_url))
    if verdict.verdict is Verdict.NEWER_COMPATIBLE:
        log.info(
            "the database schema is at revision %s, newer than this job-service's %s; "
            "it records that %s may run on it",
            verdict.database,
            verdict.code,
            verdict.code,
        )
    if verdict.may_run:
        return verdict
    if verdict.verdict is Verdict.NEWER_INCOMPATIBLE:
        raise SchemaMismatch(verdict.refusal())
    if not migrate_on_start:
        raise SchemaMismatch(verdict.refusal())
    if not verdict.start_may_migrate:
        raise SchemaMismatch(
            Compatibility(
                verdict.verdict,
                verdict.database,
                verdict.code,
                f" (instances of {verdict.database} cannot run on {verdict.code}'s schema, "
                "so a start does not migrate it: stop them, then migrate)",
            ).refusal()
        )
    log.info(
        "migrating the database schema from revision %s to %s (instances of %s can run beside it)",
        verdict.database or "none",
        verdict.code,
        verdict.database or "none",
    )
    # migrate() looks again under its lock: another instance may have migrated.
    await migrate(database_url)
    return judge(await read_database_schema(database_url))
