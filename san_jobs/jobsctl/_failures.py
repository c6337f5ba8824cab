"""``jobsctl failures``: the FAILED jobs of a time range grouped by error code, reason
and message prefix (ListFailureGroups), largest group first; what to look at before
``jobsctl retry-failed``. A rich table for people, ``--json`` for scripts."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from san_jobs.client import JobsClient
from san_jobs.jobsctl import _render
from san_jobs.jobsctl._job_inputs import add_time_range_flags
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.shared.display import format_time

HELP = "failed jobs grouped by error code, reason and message start, largest group first"


def add_parser(commands: Any) -> None:
    """Add ``failures`` to jobsctl's sub-commands (``commands``: argparse's subparsers)."""
    failures = commands.add_parser("failures", help=HELP)
    add_time_range_flags(
        failures,
        "jobs that failed since WHEN: 30m, 1h, 2d or an ISO time (default: a day; "
        "the range is at most 31 days)",
    )
    # SUPPRESS, as jobsctl's other --json flags: it may go before or after the command.
    failures.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )


def cmd_failures(client: JobsClient, args: argparse.Namespace) -> int:
    response = client.list_failure_groups(
        failed_after=args.since, failed_before=args.until, job_types=args.types
    )
    if args.json:
        _render.print_json(failures_dict(response))
    else:
        failures_table(_render.make_console(), response)
    return 0


def failures_table(console: Console, response: pb.ListFailureGroupsResponse) -> None:
    """One row per group; the message prefix is the server's (its first N characters)."""
    table = Table(
        "count", "code", "reason", f"message (first {response.message_prefix_length} chars)",
        "last failure", "example job",
        title=f"Failed {format_time(response.failed_after)} .. "
        f"{format_time(response.failed_before)}",
        title_justify="left",
    )  # fmt: skip
    table.columns[0].justify = "right"
    for group in response.groups:
        table.add_row(
            f"{group.count:,}",
            _render.markup_text(group.error_code),
            _render.markup_text(group.error_reason),
            _render.markup_text(group.message_prefix),
            format_time(group.latest_fail_time),
            group.example_job_id,
        )
    console.print(table)
    if not response.groups:
        console.print("no failed jobs in this range")
    if response.truncated:
        console.print("[yellow]more groups than one answer holds: narrow the range or --type[/]")


def failures_dict(response: pb.ListFailureGroupsResponse) -> dict[str, Any]:
    return {
        "failedAfter": format_time(response.failed_after),
        "failedBefore": format_time(response.failed_before),
        "messagePrefixLength": response.message_prefix_length,
        "truncated": response.truncated,
        "groups": [
            {
                "errorCode": group.error_code,
                "errorReason": group.error_reason,
                "messagePrefix": group.message_prefix,
                "count": group.count,
                "latestFailTime": format_time(group.latest_fail_time),
                "exampleJobId": group.example_job_id,
            }
            for group in response.groups
        ],
    }
