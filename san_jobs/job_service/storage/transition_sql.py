"""The transition declarations (domain/transitions.py) compiled to SQL.

A declaration says what a write does; this module only says it in SQL, for PostgreSQL
and SQLite:

- WHERE: the source statuses (as literal SQL, so the planners match the partial
  indexes) and each source's requirements. Requirements every source shares are
  plain terms (the claim's `due_at <= now` stays an index range); the others are
  OR-ed per source status.
- SET: `Transition.columns()` (status, the cleared claim, the derived due_at), each
  expression read against the row as it was, as SQL's SET does. `New(c)` is
  replaced by what the write gives `c`, then folded (`COALESCE(x, now)` is `x` when
  `x` cannot be NULL), so due_at reads as the value it copies.
- the attempt record: each source's edits as JSON functions (json_sql.JsonSql), a
  CASE on the old status where the sources differ.
- RETURNING, and on PostgreSQL the change notification in the same statement when
  the transition `notifies`.

Arguments (`Arg`) and the time (`Now`, `LeaseUntil`) come from `Inputs`: bound
parameters `p_<name>` for one job (`Params`), or the fields of a JSON batch of rows
(`Rows`), where `Now()` is each row's own call time when the rows carry it. An
argument's SQL type is that of the column it is written to (the error fields of an
attempt record are the columns of the same names).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    Integer,
    String,
    Text,
    and_,
    bindparam,
    case,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.types import JSON, TypeEngine

from san_jobs.job_service.domain.model import ACTIVE_STATUSES, JobStatus
from san_jobs.job_service.domain.transitions import (
    ATTEMPT_ERROR_FIELDS,
    ATTEMPT_FIELDS,
    ATTEMPT_USAGE_FIELD,
    NO_ROW,
    TYPE_LIST_SEPARATOR,
    Arg,
    AtMost,
    AttemptEdit,
    BySource,
    CloseAttempt,
    Coalesce,
    Col,
    DropAttempt,
    Expr,
    IsNull,
    LeaseUntil,
    Lit,
    New,
    NewToken,
    NotNull,
    Now,
    OpenAttempt,
    Plus,
    Requires,
    Transition,
    When,
    check_declarations,
)
from san_jobs.job_service.storage.json_sql import JsonRows, JsonSql, Value, json_text, p_str, p_time
from san_jobs.job_service.storage.notify import (
    CHANNEL,
    FIELD_SEPARATOR,
    ID_SEPARATOR,
    IDS_PER_NOTIFICATION,
    payload_prefix,
)
from san_jobs.job_service.storage.tables import ACTIVE_SQL, UtcDateTime, async_jobs

t = async_jobs

# A declaration that disagrees with ALLOWED_TRANSITIONS is never compiled.
check_declarations()

P_NOW, P_NOW_ISO, P_UNTIL = "p_now", "p_now_iso", "p_until"
# A batch row's own call time, where Now() is per row: as stored, and as ISO text.
ROW_AT, ROW_AT_ISO = "at", "at_iso"
# A WHERE term: an expression, or literal SQL (the partial indexes' predicates).
Term = ColumnElement[bool] | TextClause

# The columns an attempt record's error fields mirror (same names).
_ERROR_FIELDS = ATTEMPT_ERROR_FIELDS
# The columns the requirements compare with the caller's arguments.
_REQUIREMENT_ARGS = {
    Requires.BY_ID: (("job_id", t.c.id),),
    Requires.CLAIM_TOKEN: (("token", t.c.claim_token),),
    Requires.OWNER_IF_GIVEN: (("owner", t.c.requested_by),),
    # Text, as job_type (claim_type_args: a list in one text, and one name or "").
    Requires.TYPE_WANTED: (("skip_types", t.c.job_type), ("only_type", t.c.job_type)),
}


def time_params(now: datetime, lease_seconds: float = 0.0) -> dict[str, Any]:
    """The time of a call, as every statement's parameters: Now() and LeaseUntil()."""
    return {P_NOW: now, P_NOW_ISO: now.isoformat(), P_UNTIL: now + timedelta(seconds=lease_seconds)}


def _is_json(column: Column[Any]) -> bool:
    return isinstance(column.type, JSON)


class Inputs:
    """Where a compiled transition reads its arguments and the time from."""

    now: ColumnElement[Any]
    now_iso: ColumnElement[Any]
    until: ColumnElement[Any]

    def arg(self, name: str) -> ColumnElement[Any]:
        raise NotImplementedError

    def by_id(self) -> list[ColumnElement[bool]]:
        """Requires.BY_ID: the job(s) the caller names."""
        raise NotImplementedError


class Params(Inputs):
    """One job per statement: `Arg(x)` is the bound parameter `p_x`. With `ids`, the
    statement takes a list of jobs instead, `p_job_ids` (an expanding IN list)."""

    def __init__(self, columns: Mapping[str, Column[Any]], *, ids: bool = False) -> None:
        self._params = {
            name: bindparam(
                f"p_{name}", type_=column.type if _is_json(column) else type(column.type)()
            )
            for name, column in columns.items()
        }
        self._ids = ids
        self.now, self.now_iso, self.until = p_time(P_NOW), p_str(P_NOW_ISO), p_time(P_UNTIL)

    def arg(self, name: str) -> ColumnElement[Any]:
        return self._params[name]

    def by_id(self) -> list[ColumnElement[bool]]:
        if self._ids:
            return [t.c.id.in_(bindparam("p_job_ids", expanding=True))]
        return [t.c.id == self._params["job_id"]]

    @staticmethod
    def bind(**args: Any) -> dict[str, Any]:
        """Parameter values for the arguments named: `{"p_<name>": value}`."""
        return {f"p_{name}": value for name, value in args.items()}


class Rows(Inputs):
    """A batch of jobs in one statement, as the JSON rows of `p_rows` (JsonRows): one
    field per argument, plus the row's own call time where `per_row_time`."""

    def __init__(
        self, postgres: bool, columns: Mapping[str, Column[Any]], *, per_row_time: bool
    ) -> None:
        fields: dict[str, TypeEngine[Any]] = {
            # JSON values travel as JSON text; no lengths (the column checks those).
            name: Text() if _is_json(column) else type(column.type)()
            for name, column in columns.items()
        }
        if per_row_time:
            fields |= {ROW_AT: UtcDateTime(), ROW_AT_ISO: String()}
        self.batch = batch = JsonRows(postgres, fields)
        self._json = {name for name, column in columns.items() if _is_json(column)}
        self._times = {
            name for name, column in columns.items() if isinstance(column.type, UtcDateTime)
        }
        self._names = frozenset(columns)
        self.per_row_time = per_row_time
        if per_row_time:
            self.now, self.now_iso = batch[ROW_AT], batch[ROW_AT_ISO]
        else:
            self.now, self.now_iso = p_time(P_NOW), p_str(P_NOW_ISO)
        self.until = p_time(P_UNTIL)

    @property
    def table(self) -> Any:
        return self.batch.table

    def arg(self, name: str) -> ColumnElement[Any]:
        return self.batch.json(name) if name in self._json else self.batch[name]

    def by_id(self) -> list[ColumnElement[bool]]:
        return [self.batch.has_row_id(t.c.id), t.c.id == self.batch["job_id"]]

    def row(self, at: datetime | None = None, **args: Any) -> dict[str, Any]:
        """One row of the batch: every argument by name (JSON values and times
        encoded as the statement reads them), and `at`, the call's time, where the
        rows carry it."""
        if args.keys() != self._names or (at is None) == self.per_row_time:
            raise TypeError(f"a row needs {sorted(self._names)} (and `at`: {self.per_row_time})")
        row = args
        for name in self._json:
            row[name] = json_text(row[name])
        for name in self._times:
            row[name] = self.batch.time(row[name])
        if at is not None:
            row[ROW_AT], row[ROW_AT_ISO] = self.batch.time(at), at.isoformat()
        return row

    @staticmethod
    def param(rows: list[dict[str, Any]]) -> dict[str, str]:
        """The statement's parameter for a batch of `row()`s."""
        return {"p_rows": json_text(rows)}


class TransitionSql:
    """Compiles transitions for one dialect; the statements' shapes (a claim's ordered
    selection, an INSERT's conflict rule) are statements.py's."""

    def __init__(self, postgres: bool, instance_id: str) -> None:
        self.pg = postgres
        self.instance_id = instance_id
        self.json = JsonSql(postgres)

    # -- inputs --------------------------------------------------------------------

    def params(self, transition: Transition, *, ids: bool = False) -> Params:
        return Params(argument_columns([transition]), ids=ids)

    def rows(self, transitions: Sequence[Transition], *, per_row_time: bool) -> Rows:
        return Rows(self.pg, argument_columns(transitions), per_row_time=per_row_time)

    # -- WHERE ---------------------------------------------------------------------

    def condition(
        self, transition: Transition, inputs: Inputs, *, owner: bool = False
    ) -> list[Term]:
        """The rows `transition` moves. `owner`: Requires.OWNER_IF_GIVEN is given."""
        required = {s: src.requires for s, src in transition.sources.items() if s is not NO_ROW}
        shared = frozenset.intersection(*required.values())
        terms: list[Term] = []
        # A claim token exists only on a PROCESSING job (ck_async_jobs_claimed): no
        # status test, which would let the planner read all active rows through a
        # partial index instead of looking the ids up.
        if Requires.CLAIM_TOKEN not in shared:
            terms += status_test(s for s in required if s is not None)
        terms += self._requirements(shared, inputs, owner)
        own = {s: needs - shared for s, needs in required.items() if s is not None}
        if any(own.values()):
            terms.append(
                or_(
                    *(
                        and_(_status_is(s), *self._requirements(needs, inputs, owner))
                        for s, needs in own.items()
                    )
                )
            )
        return terms

    def _requirements(
        self, needs: frozenset[Requires], inputs: Inputs, owner: bool
    ) -> list[ColumnElement[bool]]:
        terms: list[ColumnElement[bool]] = []
        for need in Requires:  # in declaration order, for a stable text
            if need not in needs:
                continue
            if need is Requires.BY_ID:
                terms += inputs.by_id()
            elif need is Requires.CLAIM_TOKEN:
                terms.append(t.c.claim_token == inputs.arg("token"))
            elif need is Requires.DUE:
                terms.append(t.c.due_at <= inputs.now)
            elif need is Requires.ATTEMPTS_LEFT:
                terms.append(t.c.attempt_count < t.c.max_attempts)
            elif need is Requires.ATTEMPTS_USED:
                terms.append(t.c.attempt_count >= t.c.max_attempts)
            elif need is Requires.OWNER_IF_GIVEN:
                if owner:
                    terms.append(t.c.requested_by == inputs.arg("owner"))
            elif need is Requires.TYPE_WANTED:
                terms += self._type_wanted(inputs)
            else:  # pragma: no cover - a new requirement must be compiled here
                raise TypeError(f"cannot compile requirement {need}")
        return terms

    def _type_wanted(self, inputs: Inputs) -> list[ColumnElement[bool]]:
        """Requires.TYPE_WANTED (claim_type_args' encoding). Filters on the rows the
        due index yields, so the claim stays one ordered range scan."""
        skip, only = inputs.arg("skip_types"), inputs.arg("only_type")
        needle = (
            literal(TYPE_LIST_SEPARATOR, String)
            + t.c.job_type
            + literal(TYPE_LIST_SEPARATOR, String)
        )
        found = func.strpos(skip, needle) if self.pg else func.instr(skip, needle)
        return [found == 0, or_(only == literal("", String), t.c.job_type == only)]

    # -- SET -----------------------------------------------------------------------

    def assignments(
        self, transitions: Sequence[Transition], inputs: Inputs
    ) -> dict[str, ColumnElement[Any]]:
        """SET for one transition, or for several sharing a statement (each row
        takes the first whose `when` holds; the last is the rest)."""
        written = [written_columns(tr) for tr in transitions]
        names = list(dict.fromkeys(name for columns in written for name in columns))
        values: dict[str, ColumnElement[Any]] = {}
        for name in names:
            options = [columns.get(name, Col(name)) for columns in written]
            values[name] = self.value(_choose(transitions, options), inputs)
        attempts = self._attempts_chosen(transitions, inputs)
        if attempts is not None:
            values["attempts"] = attempts
        return values

    def insert_values(
        self, transition: Transition, inputs: Inputs
    ) -> dict[str, ColumnElement[Any]]:
        """The new row's columns, in table order (NULLs left to the column)."""
        written = written_columns(transition)
        values = {
            name: self.value(expr, inputs)
            for name, expr in written.items()
            if expr != Lit(None) or t.c[name].server_default is not None
        }
        attempts = self.json.empty_list()
        for edit in transition.sources[NO_ROW].attempts:
            attempts = self._edit(attempts, edit, inputs)
        values["attempts"] = attempts
        return {c.name: values[c.name] for c in t.c if c.name in values}

    def value(self, expr: Expr, inputs: Inputs) -> ColumnElement[Any]:
        """`expr` in SQL, reading the row as it was."""
        match expr:
            case Lit() | Col() | Arg() | Now() | LeaseUntil() | NewToken():
                return self._operand(expr, inputs)
            case Plus(left=left, right=Lit(value=int() as number)) if number < 0:
                return self.value(left, inputs) - -number
            case Plus(left=left, right=right):
                return self.value(left, inputs) + self.value(right, inputs)
            case Coalesce(values=items):
                return func.coalesce(*(self.value(item, inputs) for item in items))
            case AtMost(value=value, limit=limit):
                return self.value(value, inputs) <= limit
            case IsNull(value=value):
                return self.value(value, inputs).is_(None)
            case NotNull(value=value):
                return self.value(value, inputs).is_not(None)
            case When(condition=condition, then=then, otherwise=otherwise):
                return case(
                    (self.value(condition, inputs), self.value(then, inputs)),
                    else_=self.value(otherwise, inputs),
                )
            case BySource(cases=cases, otherwise=otherwise):
                return case(
                    *((_status_is(s), self.value(v, inputs)) for s, v in cases.items()),
                    else_=self.value(otherwise, inputs),
                )
        raise TypeError(f"cannot compile {expr!r} (a New() left after resolving?)")

    def _operand(self, expr: Expr, inputs: Inputs) -> ColumnElement[Any]:
        """A value that is not built of others."""
        match expr:
            case Lit(value=None):
                return null()
            case Lit(value=str() as word):
                return literal(word, String())
            case Lit(value=int() as number):
                return literal(number, Integer())
            case Col(name=name):
                return t.c[name]
            case Arg(name=name):
                return inputs.arg(name)
            case Now():
                return inputs.now
            case LeaseUntil():
                return inputs.until
            case NewToken():
                return self.json.random_token()
        raise TypeError(f"cannot compile {expr!r}")

    # -- the attempt record ----------------------------------------------------------

    def _attempts_chosen(
        self, transitions: Sequence[Transition], inputs: Inputs
    ) -> ColumnElement[Any] | None:
        edits = [_edits_by_source(tr) for tr in transitions]
        if all(e == edits[0] for e in edits):
            return self._attempts(transitions[0], inputs)
        chosen = [self._attempts(tr, inputs) for tr in transitions]
        last = chosen[-1] if chosen[-1] is not None else t.c.attempts
        return case(
            *(
                (self.value(_when(tr), inputs), c if c is not None else t.c.attempts)
                for tr, c in zip(transitions[:-1], chosen[:-1], strict=True)
            ),
            else_=last,
        )

    def _attempts(self, transition: Transition, inputs: Inputs) -> ColumnElement[Any] | None:
        """The attempts column after `transition`, or None if no source edits it. A
        CASE on the old status where sources differ (the first source is the ELSE)."""
        by_source = {s: src.attempts for s, src in transition.sources.items() if s is not NO_ROW}
        if not any(by_source.values()):
            return None
        compiled = {s: self._edited(edits, inputs) for s, edits in by_source.items()}
        first, *others = by_source
        if all(by_source[s] == by_source[first] for s in others):
            return compiled[first]
        return case(*((_status_is(s), compiled[s]) for s in others), else_=compiled[first])

    def _edited(self, edits: tuple[AttemptEdit, ...], inputs: Inputs) -> ColumnElement[Any]:
        attempts: ColumnElement[Any] = t.c.attempts
        for edit in edits:
            attempts = self._edit(attempts, edit, inputs)
        return attempts

    def _edit(
        self, attempts: ColumnElement[Any], edit: AttemptEdit, inputs: Inputs
    ) -> ColumnElement[Any]:
        js = self.json
        match edit:
            case OpenAttempt():
                return js.append(attempts, js.obj(self._fields(opened_attempt(), inputs)))
            case CloseAttempt():
                return js.patch_last(attempts, self._fields(closed_attempt(edit), inputs))
            case DropAttempt():
                return js.drop_last(attempts)
        raise TypeError(f"cannot compile attempt edit {edit!r}")  # pragma: no cover

    def _fields(self, fields: Mapping[str, Expr], inputs: Inputs) -> dict[str, Value]:
        """Attempt fields as JSON values: times as ISO text, words as JSON strings."""
        values: dict[str, Value] = {}
        for name, expr in fields.items():
            match expr:
                case Lit(value=None):
                    values[name] = None
                case Lit(value=str() as word):
                    values[name] = word
                case Now():
                    values[name] = inputs.now_iso
                case Arg() if name == ATTEMPT_USAGE_FIELD:
                    values[name] = self.json.nested(self.value(expr, inputs))
                case _:
                    values[name] = self.value(expr, inputs)
        return values

    # -- whole statements ------------------------------------------------------------

    def update(
        self,
        transitions: Sequence[Transition],
        inputs: Inputs,
        *,
        owner: bool = False,
        where: Sequence[Term] | None = None,
        returning: tuple[Any, ...] = tuple(t.c),
    ) -> Any:
        """`UPDATE async_jobs SET ... WHERE ... RETURNING ...` for `transitions`
        (several: they must leave from the same sources), notifying if they do.
        `where` replaces the declared condition (the claim selects its rows itself)."""
        first = transitions[0]
        if any(tr.sources != first.sources for tr in transitions):
            raise ValueError("transitions sharing a statement must share their sources")
        terms = self.condition(first, inputs, owner=owner) if where is None else where
        dml = update(t).where(*terms).values(self.assignments(transitions, inputs))
        return self.finish(dml, first, returning)

    def finish(
        self, dml: Any, transition: Transition, returning: tuple[Any, ...] = tuple(t.c)
    ) -> Any:
        """`dml RETURNING returning`, with the notification if `transition` notifies."""
        if transition.notifies:
            return self.notifying(dml, returning)
        return dml.returning(*returning)

    def notifying(self, dml: Any, columns: tuple[Any, ...] = tuple(t.c)) -> Any:
        """`dml RETURNING *` (or just `columns`, which then must include id and
        status); on PostgreSQL, in the same statement, pg_notify for the
        changed rows (grouped by new status, at most IDS_PER_NOTIFICATION ids each):

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
        # The format notify.py defines (and parses).
        payload = (
            literal(payload_prefix(self.instance_id), String)
            + numbered.c.status
            + literal(FIELD_SEPARATOR, String)
            + func.string_agg(numbered.c.id, literal(ID_SEPARATOR, String))
        )
        sent = (
            select(func.pg_notify(literal(CHANNEL, String), payload).label("sent"))
            .group_by(numbered.c.status, numbered.c.grp)
            .cte("sent")
        )
        forced = select(func.count()).select_from(sent).scalar_subquery()
        return select(changed).where(forced >= 0)


# -- the declarations, resolved --------------------------------------------------------


def status_test(statuses: Iterable[JobStatus]) -> list[Term]:
    """`status` among `statuses`, as literal SQL. Active statuses also get the
    partial indexes' own predicate (ACTIVE_SQL): SQLite uses a partial index only
    when the query repeats its WHERE term."""
    wanted = set(statuses)
    tests: list[Term] = []
    if wanted <= ACTIVE_STATUSES:
        tests.append(text(ACTIVE_SQL))
        if wanted == ACTIVE_STATUSES:
            return tests
    if len(wanted) == 1:
        return [*tests, _status_is(next(iter(wanted)))]
    words = sorted(wanted)
    return [*tests, t.c.status.in_([literal_column(f"'{s.value}'") for s in words])]


def _status_is(status: JobStatus) -> ColumnElement[bool]:
    return t.c.status == literal_column(f"'{status.value}'")


def written_columns(transition: Transition) -> dict[str, Expr]:
    """The columns `transition` writes, with `New(c)` replaced by what the write
    gives `c` and the result folded. `status` is left out where no source changes it
    (a lease renewal)."""
    columns = transition.columns()
    if all(s == transition.target for s in transition.sources):
        del columns["status"]
    insert = NO_ROW in transition.sources
    known = _not_null_args(transition)
    return {name: _fold(_resolve(expr, columns, insert), known) for name, expr in columns.items()}


def argument_columns(transitions: Sequence[Transition]) -> dict[str, Column[Any]]:
    """Each argument of `transitions` with the column whose type it takes: the column
    it is written to, the one its requirement compares it with, or the attempt
    field's column of the same name. TypeError for an argument none of these types."""
    found: dict[str, Column[Any]] = {}
    for transition in transitions:
        for source in transition.sources.values():
            for need in source.requires:
                for name, column in _REQUIREMENT_ARGS.get(need, ()):
                    found.setdefault(name, column)
            for edit in source.attempts:
                if isinstance(edit, CloseAttempt) and edit.error is not None:
                    for field, value in zip(_ERROR_FIELDS, edit.error, strict=True):
                        _type_args(value, t.c[field], found)
                if isinstance(edit, CloseAttempt) and edit.usage is not None:
                    # A JSON value, typed as the JSON column `result` is.
                    _type_args(edit.usage, t.c.result, found)
        for name, expr in transition.sets.items():
            _type_args(expr, t.c[name], found)
    args = [name for transition in transitions for name in transition.args]
    untyped = [name for name in args if name not in found]
    if untyped:
        raise TypeError(f"cannot tell the SQL type of arguments {untyped}")
    return {name: found[name] for name in dict.fromkeys(args)}


def _type_args(expr: Expr, column: Column[Any], found: dict[str, Column[Any]]) -> None:
    """Record `column` for each Arg whose value `expr` writes to it."""
    match expr:
        case Arg(name=name):
            found.setdefault(name, column)
        case Plus(left=left, right=right):
            _type_args(left, column, found)
            _type_args(right, column, found)
        case Coalesce(values=items):
            for item in items:
                _type_args(item, column, found)
        case When(then=then, otherwise=otherwise):
            _type_args(then, column, found)
            _type_args(otherwise, column, found)
        case BySource(cases=cases, otherwise=otherwise):
            for value in (*cases.values(), otherwise):
                _type_args(value, column, found)


def opened_attempt() -> dict[str, Expr]:
    """OpenAttempt's record: number attempt_count + 1, started now, open, no error."""
    fields: dict[str, Expr] = {
        "attempt": Plus(Col("attempt_count"), Lit(1)),
        "start_time": Now(),
        "end_time": Lit(None),
        **{name: Lit("") for name in _ERROR_FIELDS},
        ATTEMPT_USAGE_FIELD: Lit(None),
    }
    if tuple(fields) != ATTEMPT_FIELDS:  # pragma: no cover - JobAttempt changed shape
        raise TypeError(f"an opened attempt has {tuple(fields)}, not {ATTEMPT_FIELDS}")
    return fields


def closed_attempt(edit: CloseAttempt) -> dict[str, Expr]:
    """The fields CloseAttempt sets on the last attempt."""
    fields: dict[str, Expr] = {"end_time": Now()}
    if edit.error is not None:
        fields |= dict(zip(_ERROR_FIELDS, edit.error, strict=True))
    if edit.usage is not None:
        fields[ATTEMPT_USAGE_FIELD] = edit.usage
    return fields


def _edits_by_source(transition: Transition) -> dict[JobStatus | None, tuple[AttemptEdit, ...]]:
    return {s: src.attempts for s, src in transition.sources.items()}


def _when(transition: Transition) -> Expr:
    if transition.when is None:
        raise ValueError(f"{transition.name} shares a statement but has no `when`")
    return transition.when


def _choose(transitions: Sequence[Transition], options: list[Expr]) -> Expr:
    """The value of a column where each row takes the first transition whose `when`
    holds (the last one otherwise), folded."""
    chosen = options[-1]
    for transition, option in zip(reversed(transitions[:-1]), reversed(options[:-1]), strict=True):
        chosen = When(_when(transition), option, chosen)
    return _fold(chosen, frozenset())


def _not_null_args(transition: Transition) -> frozenset[str]:
    """Arguments a transition's `when` says are set (`NotNull(Arg(x))`)."""
    match transition.when:
        case NotNull(value=Arg(name=name)):
            return frozenset({name})
    return frozenset()


def _resolve(expr: Expr, columns: Mapping[str, Expr], insert: bool, depth: int = 0) -> Expr:
    """`expr` with each `New(c)` replaced by what the write gives `c`: its written
    value, else the column as it was (NULL in a new row)."""
    if depth > len(columns):
        raise ValueError(f"New() refers to itself in {expr!r}")

    def again(e: Expr) -> Expr:
        return _resolve(e, columns, insert, depth + 1)

    match expr:
        case New(name=name):
            if name in columns:
                return again(columns[name])
            return Lit(None) if insert else Col(name)
        case Plus(left=left, right=right):
            return Plus(again(left), again(right))
        case Coalesce(values=items):
            return Coalesce(tuple(again(item) for item in items))
        case AtMost(value=value, limit=limit):
            return AtMost(again(value), limit)
        case IsNull(value=value):
            return IsNull(again(value))
        case NotNull(value=value):
            return NotNull(again(value))
        case When(condition=condition, then=then, otherwise=otherwise):
            return When(again(condition), again(then), again(otherwise))
        case BySource(cases=cases, otherwise=otherwise):
            return BySource({s: again(v) for s, v in cases.items()}, again(otherwise))
    return expr


def _never_null(expr: Expr, known: frozenset[str]) -> bool:
    match expr:
        case Lit(value=value):
            return value is not None
        case Now() | LeaseUntil() | NewToken():
            return True
        case Arg(name=name):
            return name in known
        case Col(name=name):
            return not t.c[name].nullable
        case Plus(left=left, right=right):
            return _never_null(left, known) and _never_null(right, known)
        case Coalesce(values=items):
            return any(_never_null(item, known) for item in items)
        case When(then=then, otherwise=otherwise):
            return _never_null(then, known) and _never_null(otherwise, known)
    return False


def _fold(expr: Expr, known: frozenset[str]) -> Expr:
    """`expr` simplified where the result is certain: COALESCE without NULLs and
    without what follows a value that cannot be NULL; a CASE whose branches agree;
    `CASE WHEN x IS NULL THEN NULL ELSE x END` is x."""
    match expr:
        case Coalesce(values=items):
            kept: list[Expr] = []
            for item in (_fold(i, known) for i in items):
                if item == Lit(None):
                    continue
                kept.append(item)
                if _never_null(item, known):
                    break
            if not kept:
                return Lit(None)
            return kept[0] if len(kept) == 1 else Coalesce(tuple(kept))
        case When(condition=condition, then=then, otherwise=otherwise):
            then, otherwise = _fold(then, known), _fold(otherwise, known)
            if then == otherwise:
                return then
            if condition == IsNull(otherwise) and then == Lit(None):
                return otherwise
            if condition == NotNull(then) and otherwise == Lit(None):
                return then
            return When(condition, then, otherwise)
        case Plus(left=left, right=right):
            return Plus(_fold(left, known), _fold(right, known))
        case BySource(cases=cases, otherwise=otherwise):
            folded = {s: _fold(v, known) for s, v in cases.items()}
            otherwise = _fold(otherwise, known)
            if all(v == otherwise for v in folded.values()):
                return otherwise
            return BySource(folded, otherwise)
    return expr
