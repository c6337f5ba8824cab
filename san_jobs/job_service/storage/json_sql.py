"""SQL for JSON, per dialect: the attempt list's edits and batches of rows.

The attempt history is a JSON list on the row. Its edits are done in SQL, in the same
statement as the state change: `jsonb_*` functions on PostgreSQL, `json_*` on SQLite.
A batch of rows travels as one JSON parameter (JsonRows), so a statement's text is the
same for any batch size.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    String,
    any_,
    bindparam,
    cast,
    column,
    func,
    literal,
    literal_column,
    null,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeEngine

from san_jobs.job_service.storage.tables import UtcDateTime

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

    def nested(self, value: ColumnElement[Any]) -> ColumnElement[Any]:
        """A JSON value (jsonb on PostgreSQL, JSON text on SQLite) to put inside an
        object: SQLite's json functions take text as a string unless it goes through
        json() (NULL stays NULL, a JSON null)."""
        return value if self.pg else func.json(value)

    def drop_last(self, array: ColumnElement[Any]) -> ColumnElement[Any]:
        if self.pg:
            return array.op("-")(literal(-1))
        return func.json_remove(array, literal("$[#-1]", String))

    def empty_list(self) -> ColumnElement[Any]:
        """`[]`: the attempts of a new row."""
        return cast(literal_column("'[]'"), JSONB) if self.pg else literal_column("'[]'")

    def random_token(self) -> ColumnElement[Any]:
        if self.pg:
            return cast(func.gen_random_uuid(), String)
        return func.lower(func.hex(func.randomblob(16)))


# json.dumps with arguments builds a new JSONEncoder on every call: made once here,
# a batch's rows cost 1-2 us less each (issue 15). Same text as json.dumps.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def json_text(value: Any) -> str:
    """JSON as the engine writes it (compact, Korean text kept readable)."""
    return _ENCODE(value)


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
        """A timestamp as the column stores it (`row_time`)."""
        return row_time(self.pg, value)


def row_time(postgres: bool, value: datetime | None) -> str | None:
    """A timestamp as a JSON row gives it to its column: timestamptz text on
    PostgreSQL, naive UTC `YYYY-MM-DD HH:MM:SS.ffffff` on SQLite (what UtcDateTime
    binds there)."""
    if value is None:
        return None
    moment = value.astimezone(UTC)
    if postgres:
        return moment.isoformat()
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")
