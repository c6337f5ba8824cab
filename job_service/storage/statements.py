"""The SQL of the hot paths, built once per store with bound parameters.

Building a SQLAlchemy statement costs more than running it on a fast database, so the
statements the worker and Enqueue run thousands of times a second are made here once
(per dialect and instance id) and executed with a parameter dict. Parameter names all
start with `p_` (column names are reserved in SET clauses).

The attempt history is a JSON list on the row. Its edits are done in SQL, in the same
statement as the state change: `jsonb_*` functions on PostgreSQL, `json_*` on SQLite.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    String,
    Text,
    and_,
    any_,
    bindparam,
    case,
    cast,
    column,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeEngine

from job_service.domain.model import JobStatus
from job_service.storage.notify import CHANNEL
from job_service.storage.tables import ACTIVE_SQL, UtcDateTime, async_jobs

t = async_jobs

LEASE_EXPIRED_CODE = "LEASE_EXPIRED"
LEASE_EXPIRED_MESSAGE = "Lease expired: the worker was lost"
CANCELLED_CODE = "CANCELLED"

# Literal SQL (not bound parameters) so the planners can match the partial indexes.
ACTIVE = text(ACTIVE_SQL)
IS_PENDING = t.c.status == literal_column("'PENDING'")
IS_PROCESSING = t.c.status == literal_column("'PROCESSING'")
IS_FAILED = t.c.status == literal_column("'FAILED'")

# The session of the connections that run the hot statements on PostgreSQL. Each
# touches a handful of rows, found by key or by the due index. But a queue table
# changes faster than ANALYZE runs, so the planner's estimates are usually stale
# (a fresh table: ~10 rows of thousands), and it then "saves" on tiny scans that
# are not tiny: reading every due row by bitmap and sorting them for each claim, or
# a sequential scan of the whole table to find 10 ids (both seen, at 1-3 ms a
# statement, with auto_explain). Without bitmap and sequential scans the planner
# can only take the indexes these statements were written for. (A connection goes
# back to the pool reset.)
HOT_SESSION = ("SET enable_bitmapscan = off", "SET enable_seqscan = off")
HOT_SESSION_RESET = ("RESET enable_bitmapscan", "RESET enable_seqscan")

# Ids per notification: 150 x 37 bytes + the prefix stays below notify.MAX_PAYLOAD_BYTES.
IDS_PER_NOTIFICATION = 150

Value = ColumnElement[Any] | str | None


class array_of(FunctionElement[Any]):
    """`ARRAY(SELECT ...)` on PostgreSQL (from a scalar subquery)."""

    inherit_cache = True
    name = "array_of"


@compiles(array_of, "postgresql")
def _compile_array_of(element: array_of, compiler: SQLCompiler, **kw: Any) -> str:
    (subquery,) = element.clauses
    return f"ARRAY{compiler.process(subquery, **kw)}"


def p_str(name: str) -> ColumnElement[Any]:
    return bindparam(name, type_=String)


def p_time(name: str) -> ColumnElement[Any]:
    return bindparam(name, type_=UtcDateTime)


class JsonSql:
    """The few JSON edits on the `attempts` list, per dialect."""

    def __init__(self, postgres: bool) -> None:
        self.pg = postgres

    @staticmethod
    def _value(value: Value, pg: bool) -> ColumnElement[Any]:
        if value is None:
            return cast(null(), String) if pg else null()
        if isinstance(value, str):
            return literal(value, String)
        return value

    def obj(self, pairs: dict[str, Value]) -> ColumnElement[Any]:
        args: list[ColumnElement[Any]] = []
        for key, value in pairs.items():
            args += [literal(key, String), self._value(value, self.pg)]
        return func.jsonb_build_object(*args) if self.pg else func.json_object(*args)

    def append(self, array: ColumnElement[Any], item: ColumnElement[Any]) -> ColumnElement[Any]:
        if self.pg:
            return array.op("||")(func.jsonb_build_array(item))
        return func.json_insert(array, literal("$[#]", String), item)

    def patch_last(self, array: ColumnElement[Any], fields: dict[str, Value]) -> ColumnElement[Any]:
        """Set `fields` on the last element (the open attempt)."""
        if self.pg:
            last = func.coalesce(array.op("->")(literal(-1)), literal_column("'{}'::jsonb"))
            return func.jsonb_set(
                array, literal_column("'{-1}'::text[]"), last.op("||")(self.obj(fields))
            )
        args: list[ColumnElement[Any]] = []
        for key, value in fields.items():
            args += [literal(f"$[#-1].{key}", String), self._value(value, False)]
        return func.json_set(array, *args)

    def drop_last(self, array: ColumnElement[Any]) -> ColumnElement[Any]:
        if self.pg:
            return array.op("-")(literal(-1))
        return func.json_remove(array, literal("$[#-1]", String))

    def random_token(self) -> ColumnElement[Any]:
        if self.pg:
            return cast(func.gen_random_uuid(), String)
        return func.lower(func.hex(func.randomblob(16)))


def json_text(value: Any) -> str:
    """JSON as the engine writes it (compact, Korean text kept readable)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class JsonRows:
    """A batch of rows sent as ONE bound parameter, `p_rows`: a JSON array of objects.

    PostgreSQL reads it with `jsonb_to_recordset(...) AS r(name type, ...)`, SQLite
    with `json_each(...)` and `value ->> '$.name'`. The statement text is the same for
    any batch size, so it is compiled (and on PostgreSQL prepared) once. Values that
    go into JSON columns travel as JSON text (`json_text`), timestamps as `time()`."""

    def __init__(self, postgres: bool, fields: dict[str, TypeEngine[Any]]) -> None:
        self.pg = postgres
        self._rows = rows = bindparam("p_rows", type_=String)
        if postgres:
            self.table: Any = (
                func.jsonb_to_recordset(cast(rows, JSONB))
                .table_valued(*(column(name, type_) for name, type_ in fields.items()))
                .render_derived(name="r", with_types=True)
            )
        else:
            self.table = func.json_each(rows).table_valued("value").alias("r")
        self._fields = fields

    def __getitem__(self, name: str) -> ColumnElement[Any]:
        if name not in self._fields:
            raise KeyError(name)
        field: ColumnElement[Any]
        if self.pg:
            field = self.table.c[name]
        else:
            field = self.table.c.value.op("->>")(literal_column(f"'$.{name}'"))
        return field

    def has_row_id(self, id_column: ColumnElement[Any]) -> ColumnElement[bool]:
        """On PostgreSQL, `id = ANY(ARRAY(SELECT job_id FROM the rows))`: the rows are
        found by primary key whatever the planner believes of the table. Joined on
        `id = job_id` alone, a stale estimate of the table (a queue table changes
        faster than ANALYZE runs) makes it hash the whole set of PROCESSING rows,
        dead versions included, for every batch. SQLite looks the ids up as is."""
        if not self.pg:
            return true()
        ids = (
            func.jsonb_to_recordset(cast(self._rows, JSONB))
            .table_valued(column("job_id", String()))
            .render_derived(name="ids", with_types=True)
        )
        return id_column == any_(array_of(select(ids.c.job_id).scalar_subquery()))

    def json(self, name: str) -> ColumnElement[Any]:
        """A field that holds JSON text, as a value for a JSON column."""
        return cast(self[name], JSONB) if self.pg else self[name]

    def time(self, value: datetime | None) -> str | None:
        """A timestamp as the column stores it: timestamptz text on PostgreSQL, naive
        UTC `YYYY-MM-DD HH:MM:SS.ffffff` on SQLite (what UtcDateTime binds there)."""
        if value is None:
            return None
        moment = value.astimezone(UTC)
        if self.pg:
            return moment.isoformat()
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


class Statements:
    """Prebuilt statements for one dialect; writes return every column (`RETURNING *`)
    and, on PostgreSQL, send their change notification within the same statement."""

    def __init__(self, postgres: bool, instance_id: str) -> None:
        self.pg = postgres
        self.instance_id = instance_id
        self.json = js = JsonSql(postgres)
        now, now_iso = p_time("p_now"), p_str("p_now_iso")
        owned = and_(t.c.id == p_str("p_id"), t.c.claim_token == p_str("p_token"), IS_PROCESSING)
        released = {"claim_token": None, "lease_expires_at": None}

        insert = postgresql.insert(t) if postgres else sqlite.insert(t)
        self.enqueue = self.returning(
            insert.values({c.name: bindparam(f"p_{c.name}", type_=c.type) for c in t.c})
            # Both unique indexes (active target, request_id), no error, no abort.
            .on_conflict_do_nothing()
        )

        # Group commit: every row of the batch in one INSERT; rows refused by a unique
        # index (including a row of the same batch) are left out of RETURNING. Rows go
        # in array order, so the earlier caller wins a conflict inside the batch. Only
        # the ids come back: the new rows are exactly what was sent (see repository).
        self.enqueue_rows = new = JsonRows(
            postgres,
            {
                "job_id": String(),
                "job_type": String(),
                "target_id": String(),
                "params": Text(),
                "requested_by": String(),
                "request_id": String(),
                "max_attempts": Integer(),
            },
        )
        empty_list = cast(literal_column("'[]'"), JSONB) if postgres else literal_column("'[]'")
        columns = {
            "id": new["job_id"],
            "job_type": new["job_type"],
            "status": literal_column("'PENDING'"),
            "target_id": new["target_id"],
            "request_params": new.json("params"),
            "requested_by": new["requested_by"],
            "request_id": new["request_id"],
            "attempt_count": literal_column("0"),
            "max_attempts": new["max_attempts"],
            "attempts": empty_list,
            "created_at": now,
            "updated_at": now,
            "due_at": now,
        }
        rows = select(*columns.values()).select_from(new.table)
        if not postgres:
            rows = rows.where(true())  # SQLite: INSERT ... SELECT before ON CONFLICT needs a WHERE
        self.enqueue_many = self.returning(
            insert.from_select(list(columns), rows).on_conflict_do_nothing(),
            (t.c.id, t.c.status),
        )

        self.by_id = select(t).where(t.c.id == p_str("p_id"))
        self.by_request_id = select(t).where(t.c.request_id == p_str("p_request_id"))
        self.active_for_target = select(t).where(
            t.c.job_type == p_str("p_job_type"), t.c.target_id == p_str("p_target_id"), ACTIVE
        )
        self.by_ids = select(t).where(t.c.id.in_(bindparam("p_ids", expanding=True)))

        # Due: PENDING whose due_at (created_at or next_attempt_at) passed, or PROCESSING
        # whose lease (due_at) expired with attempts left. One ordered range scan over
        # the partial index ix_async_jobs_due, which stops after p_limit rows (on
        # PostgreSQL the claim's connection forbids the bitmap scan a stale estimate
        # would pick, see HOT_SESSION).
        due = (
            select(t.c.id)
            .where(ACTIVE, t.c.due_at <= now, or_(IS_PENDING, t.c.attempt_count < t.c.max_attempts))
            .order_by(t.c.due_at)
            .limit(bindparam("p_limit", type_=Integer))
        )
        if postgres:
            due = due.with_for_update(skip_locked=True)
        new_attempt = js.obj(
            {
                "attempt": t.c.attempt_count + 1,
                "start_time": now_iso,
                "end_time": None,
                "error_code": "",
                "error_reason": "",
                "error_message": "",
            }
        )
        lease_expired: dict[str, Value] = {
            "end_time": now_iso,
            "error_code": LEASE_EXPIRED_CODE,
            "error_reason": "",
            "error_message": LEASE_EXPIRED_MESSAGE,
        }
        until = p_time("p_until")
        # PostgreSQL: `id = ANY(ARRAY(SELECT ...))` makes primary-key lookups for the
        # few ids taken; `id IN (SELECT ...)` may become a hash join over the table.
        due_ids = t.c.id == any_(array_of(due.scalar_subquery())) if postgres else t.c.id.in_(due)
        self.claim = self.returning(
            update(t)
            .where(due_ids)
            .values(
                status=JobStatus.PROCESSING.value,
                claim_token=js.random_token(),
                lease_expires_at=until,
                due_at=until,
                started_at=now,
                updated_at=now,
                next_attempt_at=None,
                attempt_count=t.c.attempt_count + 1,
                # In SET, `status` is still the old value: PROCESSING means a re-claim.
                error_code=case((IS_PROCESSING, LEASE_EXPIRED_CODE), else_=t.c.error_code),
                error_reason=case((IS_PROCESSING, ""), else_=t.c.error_reason),
                error_message=case((IS_PROCESSING, LEASE_EXPIRED_MESSAGE), else_=t.c.error_message),
                attempts=case(
                    (
                        IS_PROCESSING,
                        js.append(js.patch_last(t.c.attempts, lease_expired), new_attempt),
                    ),
                    else_=js.append(t.c.attempts, new_attempt),
                ),
            )
        )

        self.fail_exhausted_leases = self.returning(
            update(t)
            .where(ACTIVE, IS_PROCESSING, t.c.due_at <= now, t.c.attempt_count >= t.c.max_attempts)
            .values(
                status=JobStatus.FAILED.value,
                failed_at=now,
                updated_at=now,
                due_at=None,
                error_code=LEASE_EXPIRED_CODE,
                error_reason="",
                error_message=LEASE_EXPIRED_MESSAGE,
                attempts=js.patch_last(t.c.attempts, lease_expired),
                **released,
            )
        )

        # Every lease this instance holds, pushed forward in one statement.
        self.renew_rows = held = JsonRows(postgres, {"job_id": String(), "token": String()})
        self.renew_leases = (
            update(t)
            .where(self._owned_by(held))
            .values(lease_expires_at=until, due_at=until)
            .returning(t.c.id)
        )

        # Outcomes, one statement per batch of (job id, claim token, ...) rows. Each row
        # still needs its own token and PROCESSING: rows that do not match are simply
        # not updated (and not returned), and their callers hear LeaseLostError. Each
        # row carries the time of its own call (`at`, `at_iso`), as a single write
        # would have: a retry's delay counts from the failure, not from the batch.
        self.complete_rows = done = JsonRows(
            postgres,
            {
                "job_id": String(),
                "token": String(),
                "at": UtcDateTime(),
                "at_iso": String(),
                "result": Text(),
            },
        )
        self.complete_many = self.returning(
            update(t)
            .where(self._owned_by(done))
            .values(
                status=JobStatus.COMPLETED.value,
                result=done.json("result"),
                completed_at=done["at"],
                updated_at=done["at"],
                due_at=None,
                attempts=js.patch_last(t.c.attempts, {"end_time": done["at_iso"]}),
                **released,
            )
        )

        # A failed attempt: with `retry_at`, back to PENDING due then; without, FAILED.
        self.fail_rows = bad = JsonRows(
            postgres,
            {
                "job_id": String(),
                "token": String(),
                "at": UtcDateTime(),
                "at_iso": String(),
                "code": String(),
                "reason": String(),
                "message": Text(),
                "retry_at": UtcDateTime(),
            },
        )
        code, reason, message = bad["code"], bad["reason"], bad["message"]
        retry_at, at = bad["retry_at"], bad["at"]
        final = retry_at.is_(None)
        self.fail_many = self.returning(
            update(t)
            .where(self._owned_by(bad))
            .values(
                status=case((final, literal_column("'FAILED'")), else_=literal_column("'PENDING'")),
                failed_at=case((final, at), else_=t.c.failed_at),
                next_attempt_at=retry_at,
                due_at=retry_at,
                error_code=code,
                error_reason=reason,
                error_message=message,
                updated_at=at,
                attempts=js.patch_last(
                    t.c.attempts,
                    {
                        "end_time": bad["at_iso"],
                        "error_code": code,
                        "error_reason": reason,
                        "error_message": message,
                    },
                ),
                **released,
            )
        )

        self.release = self.returning(
            update(t)
            .where(owned)
            .values(
                status=JobStatus.PENDING.value,
                attempt_count=t.c.attempt_count - 1,
                attempts=js.drop_last(t.c.attempts),
                started_at=case((t.c.attempt_count <= 1, None), else_=t.c.started_at),
                next_attempt_at=None,
                due_at=now,
                updated_at=now,
                **released,
            )
        )

        cancelled_attempt = js.patch_last(
            t.c.attempts,
            {
                "end_time": now_iso,
                "error_code": CANCELLED_CODE,
                "error_reason": "",
                "error_message": p_str("p_cancel_message"),
            },
        )
        cancelled = {
            "status": JobStatus.CANCELLED.value,
            "cancelled_at": now,
            "cancel_reason": p_str("p_cancel_reason"),
            "updated_at": now,
            "next_attempt_at": None,
            "due_at": None,
            "attempts": case((IS_PROCESSING, cancelled_attempt), else_=t.c.attempts),
            **released,
        }
        self.cancel = self.returning(
            update(t).where(t.c.id == p_str("p_id"), ACTIVE).values(**cancelled)
        )
        # A submitter's CancelJob (--auth token): only a job it requested moves.
        self.cancel_owned = self.returning(
            update(t)
            .where(t.c.id == p_str("p_id"), t.c.requested_by == p_str("p_owner"), ACTIVE)
            .values(**cancelled)
        )

    @staticmethod
    def _owned_by(rows: JsonRows) -> ColumnElement[bool]:
        """The rows' jobs, where each row's claim token still holds the job. Only a
        PROCESSING job has a claim token (the CHECK constraint ck_async_jobs_claimed
        says so), so no status test is needed, and none is made: `status =
        'PROCESSING'` would let the planner read all active rows through a partial
        index instead of looking the ids up."""
        return and_(
            rows.has_row_id(t.c.id), t.c.id == rows["job_id"], t.c.claim_token == rows["token"]
        )

    def returning(self, dml: Any, columns: tuple[Any, ...] = tuple(t.c)) -> Any:
        """`dml RETURNING *` (or just `columns`, which then must include id and
        status); on PostgreSQL, in the same statement, pg_notify for the
        changed rows (grouped by new status, at most 150 ids per notification):

            WITH changed AS (dml RETURNING *),
                 numbered AS (SELECT id, status, (row_number() OVER ...) / 150 AS grp ...),
                 sent AS (SELECT pg_notify('san_jobs', prefix || status || '|' ||
                                           string_agg(id, ',')) ... GROUP BY status, grp)
            SELECT changed.* FROM changed WHERE (SELECT count(*) FROM sent) >= 0

        (The WHERE makes `sent` run; PostgreSQL delivers the notices at commit.)"""
        if not self.pg:
            return dml.returning(*columns)
        changed = dml.returning(*columns).cte("changed")
        row_number = func.row_number().over(partition_by=changed.c.status, order_by=changed.c.id)
        numbered = select(
            changed.c.id,
            changed.c.status,
            ((row_number - 1) // IDS_PER_NOTIFICATION).label("grp"),
        ).cte("numbered")
        payload = (
            literal(f"{self.instance_id}|", String)
            + numbered.c.status
            + literal("|", String)
            + func.string_agg(numbered.c.id, literal(",", String))
        )
        sent = (
            select(func.pg_notify(literal(CHANNEL, String), payload).label("sent"))
            .group_by(numbered.c.status, numbered.c.grp)
            .cte("sent")
        )
        forced = select(func.count()).select_from(sent).scalar_subquery()
        return select(changed).where(forced >= 0)
