"""How jobsctl shows things: rich tables for people, JSON for scripts.

Every text that comes from the server goes through `plain` (for plain lines) or
`markup_text` (for rich markup) before it is shown: a job's fields are written by whoever
enqueued it or by an upstream model, and a control character in them (ESC, CSI)
would otherwise drive the reader's terminal.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from san_jobs.client import JobsError
from san_jobs.client._job_types import job_result
from san_jobs.jobsctl._values import format_age
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.shared.display import (
    count_dicts,
    format_time,
    job_type_name,
    pause_dicts,
    pause_reason_name,
    status_name,
    waiting_text,
)
from san_jobs.shared.safe_text import escape_control, escape_json_unsafe, safe_text

STATUS_STYLE = {
    "PENDING": "yellow",
    "PROCESSING": "cyan",
    "COMPLETED": "green",
    "FAILED": "red",
    "CANCELLED": "magenta",
}


def plain(text: str) -> str:
    """`text` from the server made safe for a terminal line: control characters
    (newlines too) written as visible escapes, database passwords masked."""
    return safe_text(text)


def markup_text(text: str, *, multi_line: bool = False) -> str:
    """`text` from the server for rich output: control characters escaped (a line
    break kept when `multi_line`), and rich markup in it shown, not obeyed."""
    return escape(escape_control(text, keep_newlines=multi_line))


def make_console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    console = Console(file=stream, highlight=False)
    if not console.is_terminal:
        # Piped output is read by people too (less, CI logs); never cut job ids to 80 columns.
        console = Console(file=stream, highlight=False, width=200)
    return console


def to_dict(message: Message) -> dict[str, Any]:
    """The canonical proto3 JSON mapping (camelCase names, enum names, RFC 3339 times)."""
    return MessageToDict(message, always_print_fields_with_no_presence=False)


def print_json(value: Any, stream: TextIO | None = None) -> None:
    """`value` as one line of JSON: Korean stays readable, every control and format
    character is a \\u escape (no raw C1, U+2028 or U+202E reaches the terminal or the
    next program)."""
    text = escape_json_unsafe(json.dumps(value, ensure_ascii=False))
    out = stream or sys.stdout
    out.write(text + "\n")
    out.flush()


def error_dict(error: JobsError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code.name, "message": error.message}
    if error.reason:
        body["reason"] = error.reason
    if error.metadata:
        body["metadata"] = error.metadata
    violations = getattr(error, "field_violations", ())
    if violations:
        body["fieldViolations"] = [
            {"field": v.field, "description": v.description} for v in violations
        ]
    return {"error": body}


def _status(job: pb.Job) -> str:
    name = status_name(job.status)
    waiting = ""
    if job.HasField("waiting_for"):
        dependencies = job.waiting_for.reason == pb.PAUSE_REASON_DEPENDENCIES
        waiting = f" [dim](waiting: {'dependencies' if dependencies else 'type paused'})[/]"
    return f"[{STATUS_STYLE.get(name, '')}]{name}[/]{_due(job)}{waiting}"


def _due(job: pb.Job) -> str:
    """When a waiting job is due: a delayed job's schedule time, or a retry's."""
    if job.status != pb.JOB_STATUS_PENDING or not job.HasField("next_attempt_time"):
        return ""
    return f" [dim](due {format_time(job.next_attempt_time)})[/]"


def result_lines(job: pb.Job) -> list[tuple[str, str]]:
    """The job's result as (label, text) rows, whatever its type: one row per field
    (a repeated text joined with commas, a vector given as its dimension), recall
    questions one per row."""
    found = job_result(job)
    if found is None:
        return []
    _, result = found
    if isinstance(result, pb.RecallGenerationResult):
        rows = [(f"Q{i}", f"{q.question}\n→ {q.answer}") for i, q in enumerate(result.questions, 1)]
        return [*rows, ("model", result.model)]
    return [
        (field.name, _field_text(field, getattr(result, field.name))) for field in _fields(result)
    ]


def _fields(message: Message) -> list[Any]:
    """The message's field descriptors, in declaration order (Any: upb's or Python's)."""
    return list(message.DESCRIPTOR.fields)


def _field_text(field: Any, value: Any) -> str:
    """One result field as text: a vector (repeated float) as its dimension, another
    repeated field joined with commas, a message in proto JSON."""
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        items = list(value) if field.is_repeated else [value]
        return ", ".join(json.dumps(to_dict(item), ensure_ascii=False) for item in items)
    if not field.is_repeated:
        return str(value)
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return f"{len(value)} dimensions"
    return ", ".join(str(item) for item in value)


def job_detail(console: Console, job: pb.Job) -> None:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    rows: list[tuple[str, str]] = [
        ("id", markup_text(job.id)),
        ("type", job_type_name(job.job_type)),
        ("status", _status(job)),
        ("target", markup_text(job.target_id)),
        ("attempts", f"{job.attempt_count}/{job.max_attempts}"),
        ("priority", str(job.priority)),
        *([("depends on", markup_text(", ".join(job.depends_on)))] if job.depends_on else []),
        ("created", format_time(job.create_time)),
        ("updated", format_time(job.update_time)),
    ]
    if job.requested_by:
        rows.append(("requested by", markup_text(job.requested_by)))
    if job.HasField("schedule_time"):
        rows.append(("scheduled", format_time(job.schedule_time)))
    if job.HasField("next_attempt_time"):
        rows.append(("next attempt", format_time(job.next_attempt_time)))
    if job.HasField("waiting_for"):
        pause = job.waiting_for
        rows.append(("waiting", f"[yellow]{escape(waiting_text(pause))}[/]"))
        if pause.last_error:
            rows.append(("provider error", markup_text(pause.last_error)))
    if job.HasField("complete_time"):
        rows.append(("completed", format_time(job.complete_time)))
    if job.HasField("fail_time"):
        rows.append(("failed", format_time(job.fail_time)))
    if job.HasField("cancel_time"):
        reason = f" ({markup_text(job.cancel_reason)})" if job.cancel_reason else ""
        rows.append(("cancelled", format_time(job.cancel_time) + reason))
    if job.error_message:
        code = markup_text(" / ".join(c for c in (job.error_code, job.error_reason) if c))
        rows.append(
            (
                "error",
                f"[red]{markup_text(job.error_message, multi_line=True)}[/]"
                + (f" \\[{code}]" if code else ""),
            )
        )
    rows.extend((label, markup_text(text, multi_line=True)) for label, text in result_lines(job))
    for label, value in rows:
        grid.add_row(label, value)
    console.print(grid)
    if job.attempts:
        table = Table(
            "attempt", "started", "ended", "error", title="attempts", title_justify="left"
        )
        for attempt in job.attempts:
            error = " ".join(p for p in (attempt.error_code, attempt.error_message) if p)
            table.add_row(
                str(attempt.attempt),
                format_time(attempt.start_time),
                format_time(attempt.end_time),
                markup_text(error) or "-",
            )
        console.print(table)


def jobs_table(console: Console, jobs: Sequence[pb.Job]) -> None:
    table = Table("id", "type", "status", "target", "attempts", "pri", "created", "error")
    table.columns[0].no_wrap = True
    table.columns[7].overflow = "ellipsis"
    table.columns[7].max_width = 60
    table.columns[7].no_wrap = True
    for job in jobs:
        table.add_row(
            markup_text(job.id),
            job_type_name(job.job_type),
            _status(job),
            markup_text(job.target_id),
            f"{job.attempt_count}/{job.max_attempts}",
            str(job.priority),
            format_time(job.create_time),
            _error_cell(job),
        )
    console.print(table)


def _error_cell(job: pb.Job) -> str:
    """The last failure; on a COMPLETED job it is history, and shown as such."""
    if not job.error_message:
        return ""
    if job.status == pb.JOB_STATUS_COMPLETED:
        return f"[dim]earlier: {markup_text(job.error_message)}[/]"
    return markup_text(job.error_message)


def watch_line(job: pb.Job) -> str:
    """One line per state change: time, status, attempt, error."""
    parts = [
        format_time(job.update_time),
        f"{status_name(job.status):<10}",
        f"attempt {job.attempt_count}/{job.max_attempts}",
    ]
    # A COMPLETED job keeps its last failure (the contract's "last failure"); the line
    # that announces success must not read like an error.
    if job.error_message and job.status != pb.JOB_STATUS_COMPLETED:
        parts.append(plain(job.error_message.replace("\n", " ")))
    if job.HasField("waiting_for"):
        parts.append(f"waiting: {waiting_text(job.waiting_for)}")
    return "  ".join(parts)


def watch_key(job: pb.Job) -> tuple[object, ...]:
    """What makes a new `watch` line: the job's own state, and why it waits. A pause
    whose next try moves on (every few seconds through an outage) while the job stays
    as it was is not news: it would print the same line again and again, with the same
    time."""
    pause = job.waiting_for if job.HasField("waiting_for") else None
    return (
        job.status,
        job.update_time.seconds,
        job.update_time.nanos,
        job.attempt_count,
        None if pause is None else (pause.reason, pause.since.seconds, pause.since.nanos),
    )


def history_lines(job: pb.Job) -> list[str]:
    """The states a job went through before `job` (its current state), rebuilt from
    its timestamps and attempts, so `watch` started late still shows the whole road:
    PENDING at creation, PROCESSING at each attempt's start, and each failed
    attempt's outcome."""
    lines = [f"{format_time(job.create_time)}  {'PENDING':<10}  attempt 0/{job.max_attempts}"]
    for attempt in job.attempts:
        is_current = attempt.attempt == job.attempt_count and not attempt.HasField("end_time")
        if is_current and job.status == pb.JOB_STATUS_PROCESSING:
            break  # the current state itself; `watch` prints it next
        lines.append(
            f"{format_time(attempt.start_time)}  {'PROCESSING':<10}  "
            f"attempt {attempt.attempt}/{job.max_attempts}"
        )
        if attempt.error_code and attempt.HasField("end_time"):
            message = plain(attempt.error_message.replace("\n", " "))
            lines.append(
                f"{format_time(attempt.end_time)}  {'(failed)':<10}  "
                f"attempt {attempt.attempt}/{job.max_attempts}  {message}"
            )
    return lines


def stats_table(console: Console, stats: pb.GetJobStatsResponse, now: datetime) -> None:
    statuses = [s for s in pb.JobStatus.values() if s != pb.JOB_STATUS_UNSPECIFIED]
    types = [t for t in pb.JobType.values() if t != pb.JOB_TYPE_UNSPECIFIED]
    counts = {(c.job_type, c.status): c.count for c in stats.counts}
    table = Table("type", *(status_name(s) for s in statuses), "total")
    for column in table.columns[1:]:
        column.justify = "right"
    for job_type in types:
        row = [counts.get((job_type, s), 0) for s in statuses]
        table.add_row(job_type_name(job_type), *(str(n) for n in row), str(sum(row)))
    totals = [sum(counts.get((t, s), 0) for t in types) for s in statuses]
    table.add_row("[bold]all[/]", *(f"[bold]{n}[/]" for n in totals), f"[bold]{sum(totals)}[/]")
    console.print(table)
    console.print(f"oldest pending job: {oldest_pending(stats, now)}")
    if stats.paused:
        paused_table(console, stats.paused)


def paused_table(console: Console, paused: Iterable[pb.DispatchPause]) -> None:
    """The job types no instance claims now: their PENDING jobs wait, uncharged."""
    table = Table(
        "type", "reason", "since", "until", "last error", title="Paused", title_justify="left"
    )
    for pause in paused:
        table.add_row(
            job_type_name(pause.job_type),
            pause_reason_name(pause.reason),
            format_time(pause.since),
            format_time(pause.until),
            markup_text(pause.last_error),
        )
    console.print(table)


def oldest_pending(stats: pb.GetJobStatsResponse, now: datetime) -> str:
    if not stats.HasField("oldest_pending_create_time"):
        return "none pending"
    created = stats.oldest_pending_create_time.ToDatetime(tzinfo=UTC)
    age = format_age((now - created).total_seconds())
    return f"{age} old (created {format_time(stats.oldest_pending_create_time)})"


def stats_dict(stats: pb.GetJobStatsResponse, now: datetime) -> dict[str, Any]:
    body: dict[str, Any] = {
        "counts": count_dicts(stats),
        "oldestPendingCreateTime": None,
        "oldestPendingAgeSeconds": None,
        "paused": pause_dicts(stats),
    }
    if stats.HasField("oldest_pending_create_time"):
        created = stats.oldest_pending_create_time.ToDatetime(tzinfo=UTC)
        body["oldestPendingCreateTime"] = format_time(stats.oldest_pending_create_time)
        body["oldestPendingAgeSeconds"] = round((now - created).total_seconds(), 3)
    return body


def skipped_table(console: Console, skipped: Iterable[pb.SkippedJob]) -> None:
    table = Table("skipped job", "reason", title_justify="left")
    for item in skipped:
        table.add_row(markup_text(item.job_id), markup_text(item.reason))
    if table.row_count:
        console.print(table)


def _seconds(value: Any) -> float:
    """A Duration as seconds."""
    return float(value.seconds + value.nanos / 1e9)


def usage_table(console: Console, usage: pb.GetUsageResponse) -> None:
    """GetUsage's sums, one row per (type, model, caller), and their total."""
    table = Table(
        "type", "model", "caller", "attempts", "cached", "input tokens", "output tokens",
        "gateway s",
        title=f"Usage {format_time(usage.start_time)} .. {format_time(usage.end_time)}",
        title_justify="left",
    )  # fmt: skip
    for column in table.columns[3:]:
        column.justify = "right"
    for t in usage.totals:
        table.add_row(
            job_type_name(t.job_type), markup_text(t.model), markup_text(t.requested_by),
            f"{t.attempts:,}", f"{t.cached_attempts:,}", f"{t.input_tokens:,}",
            f"{t.output_tokens:,}", f"{_seconds(t.duration):,.3f}",
        )  # fmt: skip
    totals = usage.totals
    table.add_row(
        "[bold]all[/]", "", "",
        f"[bold]{sum(t.attempts for t in totals):,}[/]",
        f"[bold]{sum(t.cached_attempts for t in totals):,}[/]",
        f"[bold]{sum(t.input_tokens for t in totals):,}[/]",
        f"[bold]{sum(t.output_tokens for t in totals):,}[/]",
        f"[bold]{sum(_seconds(t.duration) for t in totals):,.3f}[/]",
    )  # fmt: skip
    console.print(table)
    if usage.truncated:
        console.print("[yellow]more groups than one answer holds: narrow the range or --type[/]")


def usage_dict(usage: pb.GetUsageResponse) -> dict[str, Any]:
    return {
        "startTime": format_time(usage.start_time),
        "endTime": format_time(usage.end_time),
        "truncated": usage.truncated,
        "totals": [
            {
                "jobType": job_type_name(t.job_type),
                "model": t.model,
                "requestedBy": t.requested_by,
                "attempts": t.attempts,
                "cachedAttempts": t.cached_attempts,
                "inputTokens": t.input_tokens,
                "outputTokens": t.output_tokens,
                "durationSeconds": round(_seconds(t.duration), 6),
            }
            for t in usage.totals
        ],
    }
