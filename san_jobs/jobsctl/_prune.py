"""``jobsctl prune``: delete the terminal jobs past the server's retention now
(PruneJobs), after a confirmation; ``--dry-run`` shows what would go: per status its
retention, the cutoff and how many jobs ended before it. A rich table for people,
``--json`` for scripts."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from google.protobuf.duration_pb2 import Duration
from rich.console import Console
from rich.table import Table

from san_jobs.client import JobsClient
from san_jobs.jobsctl import _render
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.shared.display import format_time, status_name

HELP = "delete finished jobs past the server's retention (--dry-run: show what would go)"

EXIT_DECLINED = 1
EXIT_USAGE = 2
# A prune with a big backlog runs until it is done, in small batches.
PRUNE_TIMEOUT = 3600.0


def add_parser(commands: Any) -> None:
    """Add ``prune`` to jobsctl's sub-commands (``commands``: argparse's subparsers)."""
    prune = commands.add_parser("prune", help=HELP)
    prune.add_argument(
        "--dry-run", action="store_true", help="count the jobs past retention, delete nothing"
    )
    prune.add_argument("--yes", "-y", action="store_true", help="delete without asking")
    # SUPPRESS, as jobsctl's other --json flags: it may go before or after the command.
    prune.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )


def cmd_prune(client: JobsClient, args: argparse.Namespace) -> int:
    preview = client.prune_jobs(dry_run=True)
    if args.dry_run:
        _show(preview, args.json)
        return 0
    past = sum(c.count for c in preview.counts)
    if past and not args.yes:
        if sys.stdin is None or not sys.stdin.isatty():
            sys.stderr.write(
                f"jobsctl: error: this would delete {_amount(preview)} jobs; no terminal to "
                "ask, so re-run with --yes to confirm (see 'jobsctl prune --help')\n"
            )
            return EXIT_USAGE
        from rich.prompt import Confirm  # only when asking: keeps every other command quick

        if not Confirm.ask(
            f"Delete {_amount(preview)} finished jobs past retention? This cannot be undone",
            console=_render.make_console(stderr=True),
            default=False,
        ):
            _render.make_console(stderr=True).print("aborted: nothing deleted")
            return EXIT_DECLINED
    _show(client.prune_jobs(dry_run=False, timeout=PRUNE_TIMEOUT), args.json)
    return 0


def _amount(response: pb.PruneJobsResponse) -> str:
    total = sum(c.count for c in response.counts)
    return f"{total:,}{'+' if any(c.more for c in response.counts) else ''}"


def _show(response: pb.PruneJobsResponse, as_json: bool) -> None:
    if as_json:
        _render.print_json(prune_dict(response))
    else:
        prune_table(_render.make_console(), response)


def _retention(response: pb.PruneCount) -> str:
    if not response.HasField("retention"):
        return "kept forever"
    return _duration_text(response.retention)


def _duration_text(duration: Duration) -> str:
    seconds = duration.ToTimedelta().total_seconds()
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def prune_table(console: Console, response: pb.PruneJobsResponse) -> None:
    """One row per terminal status: retention, cutoff, and the jobs past it (dry run)
    or deleted."""
    title = "Past retention now (dry run)" if response.dry_run else "Deleted"
    table = Table(
        "status", "retention", "ended before",
        "jobs past it" if response.dry_run else "jobs deleted",
        title=title, title_justify="left",
    )  # fmt: skip
    table.columns[3].justify = "right"
    for c in response.counts:
        count = f"{c.count:,}{'+' if c.more else ''}" if c.HasField("retention") else "-"
        table.add_row(status_name(c.status), _retention(c), format_time(c.cutoff_time), count)
    console.print(table)
    total = _amount(response)
    console.print(f"{total} jobs would be deleted" if response.dry_run else f"deleted {total} jobs")


def prune_dict(response: pb.PruneJobsResponse) -> dict[str, Any]:
    return {
        "dryRun": response.dry_run,
        "counts": [
            {
                "status": status_name(c.status),
                "retentionSeconds": (
                    c.retention.ToTimedelta().total_seconds() if c.HasField("retention") else None
                ),
                "cutoffTime": format_time(c.cutoff_time) if c.HasField("cutoff_time") else None,
                "count": c.count,
                "more": c.more,
            }
            for c in response.counts
        ],
    }
