"""jobsctl: enqueue, inspect, watch, retry and cancel JobService jobs.

Exit codes (also in ``jobsctl --help``)::

    0  success
    1  watch: the job ended FAILED or CANCELLED; retry-failed, prune: declined at the prompt;
       enqueue-file: some line invalid or rejected
    2  usage error (unknown flag, bad value, missing confirmation)
    3  job or schedule not found
    4  invalid input or conflict (bad request, duplicate job, job already finished,
       a schedule id used for another definition)
    5  JobService unreachable or did not answer in time (a failed TLS handshake too)
    6  any other JobService error
    7  not authenticated: no token, or one JobService refuses (UNAUTHENTICATED)
    8  permission denied: the token's role may not do this (PERMISSION_DENIED)
  130  interrupted (Ctrl-C)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import NoReturn

from san_jobs.client import (
    ChannelSettings,
    DuplicateJobError,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    JobsClient,
    JobsError,
    PermissionDeniedError,
    ScheduleExistsError,
    ServiceUnavailableError,
    UnauthenticatedError,
)
from san_jobs.jobsctl import _connection, _enqueue_file, _failures, _prune, _render, _schedules
from san_jobs.jobsctl._job_inputs import (
    InputError,
    add_enqueue_commands,
    add_time_range_flags,
    enqueue_input,
    job_type_choices,
)
from san_jobs.jobsctl._settings import JobsctlSettings
from san_jobs.jobsctl._values import (
    parse_at,
    parse_delay,
    parse_job_type,
    parse_priority,
    parse_since,
    parse_status,
    positive_int,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.shared.cli_settings import SettingsParser

EXIT_OK = 0
EXIT_JOB_UNSUCCESSFUL = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_INVALID = 4
EXIT_UNAVAILABLE = 5
EXIT_SERVER_ERROR = 6
EXIT_UNAUTHENTICATED = 7
EXIT_PERMISSION_DENIED = 8
EXIT_INTERRUPTED = 130

CONFIRM_OVER = 100
"""retry-failed asks before moving more jobs than this (unless --yes)."""

EPILOG = """\
environment:
  each connection option above has its variable, shown beside it [env ...];
  a flag beats its variable; --token-file is safer than --token (ps, shell history)

exit codes:
  0 ok; 1 watched job ended FAILED/CANCELLED (or retry/prune declined, or an
  enqueue-file line invalid or rejected); 2 usage error;
  3 job or schedule not found; 4 invalid input or conflict; 5 JobService unreachable (or TLS
  handshake failed); 6 other JobService error; 7 not authenticated;
  8 permission denied; 130 interrupted
"""


class UsageError(Exception):
    """A problem with the command line found after parsing."""


class _Parser(SettingsParser):
    """A usage error or a bad setting is one line on stderr, pointing to the help."""

    def error(self, message: str) -> NoReturn:
        super().error(f"{message} (see '{self.prog} --help')")


def _json_flag(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS lets `--json` go before or after the subcommand without one overwriting
    # the other.
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )


def _filter_flags(parser: argparse.ArgumentParser, *, for_retry: bool) -> None:
    parser.add_argument(
        "--type", dest="types", action="append", type=parse_job_type, default=[],
        metavar="TYPE", help=f"{job_type_choices()} (repeatable)",
    )  # fmt: skip
    if for_retry:
        parser.add_argument(
            "--target-id", dest="target_ids", action="append", default=[], metavar="ID",
            help="only jobs about this target (repeatable)",
        )  # fmt: skip
        parser.add_argument(
            "--job-id", dest="job_ids", action="append", default=[], metavar="JOB_ID",
            help="only this job (repeatable)",
        )  # fmt: skip
    else:
        parser.add_argument(
            "--status", dest="statuses", action="append", type=parse_status, default=[],
            metavar="STATUS", help="pending, processing, completed, failed, cancelled (repeatable)",
        )  # fmt: skip
        parser.add_argument("--target-id", default="", metavar="ID", help="only this target")
    parser.add_argument(
        "--error-contains", default="", metavar="TEXT",
        help="only jobs whose error message contains TEXT (case-sensitive)",
    )  # fmt: skip
    parser.add_argument(
        "--since", type=parse_since, default=None, metavar="WHEN",
        help=("only jobs that failed" if for_retry else "only jobs created")
        + " since WHEN: 30m, 1h, 2d or an ISO time",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    # The connection flags (--target, --token-file, --tls-ca, ...) are JobsctlSettings'
    # fields; the ones below are the command's own.
    parser = _Parser(
        prog="jobsctl",
        description="Operate JobService: enqueue, inspect, watch, retry and cancel jobs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        settings=JobsctlSettings,
    )
    parser.add_argument("--json", action="store_true", default=False, help="print JSON for scripts")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # enqueue TYPE ...
    enqueue = commands.add_parser("enqueue", help="store a new job; prints its id")
    _json_flag(enqueue)
    kinds = enqueue.add_subparsers(dest="kind", metavar="TYPE", required=True)
    common = _Parser(add_help=False)
    common.add_argument("--target-id", required=True, metavar="ID", help="what the job is about")
    common.add_argument("--request-id", default=None, help="idempotency key")
    common.add_argument("--requested-by", default="jobsctl", help="who asks (default jobsctl)")
    common.add_argument("--max-attempts", type=positive_int, default=0, metavar="N")
    common.add_argument(
        "--priority", type=parse_priority, default=0, metavar="N",
        help="1 (most urgent) to 5 (least); default 3",
    )  # fmt: skip
    common.add_argument(
        "--after", dest="depends_on", action="append", default=[], metavar="JOB_ID",
        help="run after this job completes (repeat for several; README, Dependencies)",
    )  # fmt: skip
    later = common.add_mutually_exclusive_group()
    later.add_argument(
        "--at", type=parse_at, default=None, metavar="TIME",
        help="a delayed job: not started before TIME (RFC 3339, e.g. 2026-12-24T18:00:00Z)",
    )  # fmt: skip
    later.add_argument(
        "--in", dest="delay", type=parse_delay, default=None, metavar="DURATION",
        help="a delayed job: not started before this long from now (90s, 30m, 12h, 7d)",
    )  # fmt: skip
    common.add_argument(
        "--return-existing", action="store_true",
        help="return the active job for the same type and target instead of failing",
    )  # fmt: skip
    _json_flag(common)
    add_enqueue_commands(kinds, common)  # one per job type of the contract

    get = commands.add_parser("get", help="show one job")
    get.add_argument("job_id", metavar="JOB_ID")
    _json_flag(get)

    listing = commands.add_parser("list", help="list jobs, newest first")
    _filter_flags(listing, for_retry=False)
    listing.add_argument("--page-size", type=positive_int, default=0, metavar="N")
    listing.add_argument("--page-token", default="", metavar="TOKEN")
    listing.add_argument("--all", action="store_true", help="follow every page")
    _json_flag(listing)

    watch = commands.add_parser("watch", help="follow a job until it is finished")
    watch.add_argument("job_id", metavar="JOB_ID")
    watch.add_argument("--wait-timeout", type=float, default=None, metavar="SECONDS")
    _json_flag(watch)

    retry = commands.add_parser("retry-failed", help="put FAILED jobs back to PENDING")
    _filter_flags(retry, for_retry=True)
    retry.add_argument("--all-failed", action="store_true", help="every FAILED job")
    retry.add_argument("--limit", type=positive_int, default=0, metavar="N")
    retry.add_argument("--dry-run", action="store_true", help="list what would move")
    retry.add_argument(
        "--yes", "-y", action="store_true", help=f"move over {CONFIRM_OVER} jobs without asking"
    )
    retry.add_argument("--batch-size", type=positive_int, default=100, metavar="N")
    _json_flag(retry)

    cancel = commands.add_parser("cancel", help="cancel a PENDING or PROCESSING job")
    cancel.add_argument("job_id", metavar="JOB_ID")
    cancel.add_argument("--reason", default="cancelled with jobsctl")
    _json_flag(cancel)

    stats = commands.add_parser("stats", help="counts by type and status, oldest pending job")
    _json_flag(stats)

    usage = commands.add_parser(
        "usage", help="tokens and gateway time by type, model and caller over a time range"
    )
    add_time_range_flags(
        usage, "attempts that ended since WHEN: 30m, 1h, 2d or an ISO time (default: a day)"
    )
    _json_flag(usage)
    _failures.add_parser(commands)
    _prune.add_parser(commands)
    _enqueue_file.add_parser(commands)
    _schedules.add_parser(commands)
    return parser


def cmd_enqueue(client: JobsClient, args: argparse.Namespace) -> int:
    try:
        job_input = enqueue_input(args)
    except InputError as error:
        raise UsageError(str(error)) from None
    response = client.enqueue(
        args.target_id,
        job_input,
        requested_by=args.requested_by,
        request_id=args.request_id,
        max_attempts=args.max_attempts,
        return_existing=args.return_existing,
        schedule_time=args.at if args.delay is None else datetime.now(UTC) + args.delay,
        priority=args.priority,
        depends_on=args.depends_on,
    )
    if args.json:
        _render.print_json(_render.to_dict(response))
    else:
        print(_render.plain(response.job.id), flush=True)
        if response.deduplicated:
            sys.stderr.write("jobsctl: note: an existing job was returned\n")
    return EXIT_OK


def cmd_get(client: JobsClient, args: argparse.Namespace) -> int:
    job = client.get_job(args.job_id)
    if args.json:
        _render.print_json(_render.to_dict(job))
    else:
        _render.job_detail(_render.make_console(), job)
    return EXIT_OK


def cmd_list(client: JobsClient, args: argparse.Namespace) -> int:
    filters = {
        "statuses": args.statuses,
        "job_types": args.types,
        "target_id": args.target_id,
        "error_message_contains": args.error_contains,
        "created_after": args.since,
        "page_size": args.page_size,
    }
    if args.all:
        jobs = list(client.iter_jobs(**filters))
        token = ""
    else:
        page = client.list_jobs(**filters, page_token=args.page_token)
        jobs, token = list(page.jobs), page.next_page_token
    if args.json:
        _render.print_json({"jobs": [_render.to_dict(j) for j in jobs], "nextPageToken": token})
        return EXIT_OK
    console = _render.make_console()
    if not jobs:
        console.print("no jobs match")
        return EXIT_OK
    _render.jobs_table(console, jobs)
    if token:
        _render.make_console(stderr=True).print(
            f"more: jobsctl list ... --page-token {_render.markup_text(token)}  (or --all)"
        )
    return EXIT_OK


def cmd_watch(client: JobsClient, args: argparse.Namespace) -> int:
    last: pb.Job | None = None
    for job in client.watch(args.job_id, args.wait_timeout):
        if last is None and not args.json and job.status != pb.JOB_STATUS_PENDING:
            # Started late: show the road so far before the live changes.
            for line in _render.history_lines(job):
                print(line, flush=True)
        if args.json:
            _render.print_json(_render.to_dict(job))  # machines get every update
        elif last is None or _render.watch_key(job) != _render.watch_key(last):
            print(_render.watch_line(job), flush=True)
        last = job
    assert last is not None
    if not args.json:
        console = _render.make_console()
        if last.status == pb.JOB_STATUS_COMPLETED:
            for label, text in _render.result_lines(last):
                console.print(f"[bold]{label}[/]: {_render.markup_text(text, multi_line=True)}")
        elif last.error_message:
            console.print(f"[red]error[/]: {_render.markup_text(last.error_message)}")
    return EXIT_OK if last.status == pb.JOB_STATUS_COMPLETED else EXIT_JOB_UNSUCCESSFUL


def _confirm(count: int, args: argparse.Namespace) -> bool:
    if count <= CONFIRM_OVER or args.yes:
        return True
    if sys.stdin is None or not sys.stdin.isatty():
        raise UsageError(
            f"this would move {count} jobs (over {CONFIRM_OVER}); "
            "no terminal to ask, so re-run with --yes to confirm"
        )
    from rich.prompt import Confirm  # only when asking: keeps every other command quick

    return Confirm.ask(
        f"Move {count} FAILED jobs back to PENDING?",
        console=_render.make_console(stderr=True),
        default=False,
    )


def cmd_retry_failed(client: JobsClient, args: argparse.Namespace) -> int:
    criteria = [args.job_ids, args.types, args.target_ids, args.error_contains, args.since]
    if not any(criteria) and not args.all_failed:
        raise UsageError(
            "give a filter (--type, --target-id, --job-id, --error-contains, --since) "
            "or --all-failed"
        )
    preview = client.retry_failed(
        job_ids=args.job_ids,
        job_types=args.types,
        target_ids=args.target_ids,
        error_message_contains=args.error_contains,
        failed_after=args.since,
        all_failed=args.all_failed and not any(criteria),
        limit=args.limit,
        dry_run=True,
        requested_by="jobsctl",
    )
    ids = list(preview.job_ids)
    console = _render.make_console()
    if args.dry_run:
        if args.json:
            _render.print_json(_render.to_dict(preview) | {"dryRun": True})
        else:
            console.print(f"{len(ids)} of {preview.matched_count} matched FAILED jobs would move:")
            for job_id in ids:
                console.print(_render.markup_text(job_id))
            _render.skipped_table(console, preview.skipped)
        return EXIT_OK
    if not _confirm(len(ids), args):
        _render.make_console(stderr=True).print("aborted: nothing moved")
        return EXIT_JOB_UNSUCCESSFUL
    moved, skipped = _move_in_batches(client, ids, args.batch_size, show=not args.json)
    skipped = [*preview.skipped, *skipped]
    if args.json:
        _render.print_json(
            {
                "matchedCount": preview.matched_count,
                "retriedCount": len(moved),
                "jobIds": moved,
                "skipped": [{"jobId": s.job_id, "reason": s.reason} for s in skipped],
            }
        )
    else:
        console.print(
            f"moved {len(moved)} of {preview.matched_count} matched FAILED jobs back to PENDING"
        )
        _render.skipped_table(console, skipped)
    return EXIT_OK


def _move_in_batches(
    client: JobsClient, ids: list[str], batch_size: int, *, show: bool
) -> tuple[list[str], list[pb.SkippedJob]]:
    """Move exactly the previewed jobs, a batch per call, with a progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    moved: list[str] = []
    skipped: list[pb.SkippedJob] = []
    progress = Progress(
        TextColumn("retrying"),
        BarColumn(),
        MofNCompleteColumn(),
        console=_render.make_console(stderr=True),
        transient=True,
        disable=not show or len(ids) <= batch_size,
    )
    with progress:
        task = progress.add_task("retry", total=len(ids))
        for start in range(0, len(ids), batch_size):
            batch = ids[start : start + batch_size]
            response = client.retry_failed(job_ids=batch, requested_by="jobsctl")
            moved.extend(response.job_ids)
            skipped.extend(response.skipped)
            progress.advance(task, len(batch))
    return moved, skipped


def cmd_cancel(client: JobsClient, args: argparse.Namespace) -> int:
    job = client.cancel_job(args.job_id, reason=args.reason)
    if args.json:
        _render.print_json(_render.to_dict(job))
    else:
        print(f"cancelled {_render.plain(job.id)}", flush=True)
    return EXIT_OK


def cmd_stats(client: JobsClient, args: argparse.Namespace) -> int:
    stats = client.get_job_stats()
    now = datetime.now(UTC)
    if args.json:
        _render.print_json(_render.stats_dict(stats, now))
    else:
        _render.stats_table(_render.make_console(), stats, now)
    return EXIT_OK


def cmd_usage(client: JobsClient, args: argparse.Namespace) -> int:
    usage = client.get_usage(start_time=args.since, end_time=args.until, job_types=args.types)
    if args.json:
        _render.print_json(_render.usage_dict(usage))
    else:
        _render.usage_table(_render.make_console(), usage)
    return EXIT_OK


def cmd_enqueue_file(client: JobsClient, args: argparse.Namespace) -> int:
    # A stop mid-file is told with the summary, not raised: the error is explained here.
    return _enqueue_file.cmd_enqueue_file(
        client, args, lambda error: _explain(error, client.settings)
    )


COMMANDS: dict[str, Callable[[JobsClient, argparse.Namespace], int]] = {
    "enqueue": cmd_enqueue,
    "get": cmd_get,
    "list": cmd_list,
    "watch": cmd_watch,
    "retry-failed": cmd_retry_failed,
    "cancel": cmd_cancel,
    "stats": cmd_stats,
    "usage": cmd_usage,
    "failures": _failures.cmd_failures,
    "prune": _prune.cmd_prune,
    "enqueue-file": cmd_enqueue_file,
    "schedules": _schedules.cmd_schedules,
}


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fail(message: str, code: int, error: JobsError | None, as_json: bool) -> int:
    if as_json and error is not None:
        _render.print_json(_render.error_dict(error))
    # The message quotes the server (and what the caller typed): escaped, one line.
    sys.stderr.write(f"jobsctl: error: {_render.plain(_one_line(message))}\n")
    return code


def _explain(error: JobsError, settings: ChannelSettings) -> tuple[str, int]:
    """The one-line message and exit code for a JobService error."""
    if isinstance(error, JobNotFoundError):
        return str(error), EXIT_NOT_FOUND
    if isinstance(error, DuplicateJobError):
        existing = error.existing_job_id
        return f"{error} (existing job: {existing}; --return-existing returns it)", EXIT_INVALID
    if isinstance(error, InvalidRequestError | InvalidJobStateError | ScheduleExistsError):
        return str(error), EXIT_INVALID
    if isinstance(error, UnauthenticatedError):
        hint = "give a valid token with --token-file, --token or SAN_JOBSCTL_TOKEN"
        return f"not authenticated: {error} ({hint})", EXIT_UNAUTHENTICATED
    if isinstance(error, PermissionDeniedError):
        hint = "this token's role may not do it"
        return f"permission denied: {error} ({hint})", EXIT_PERMISSION_DENIED
    if isinstance(error, ServiceUnavailableError):
        return _connection.unavailable_message(error, settings), EXIT_UNAVAILABLE
    return f"JobService error {error.code.name}: {error}", EXIT_SERVER_ERROR


def run(argv: Sequence[str] | None = None) -> int:
    """Run jobsctl with ``argv`` and return the exit code (no SystemExit for errors)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        connection = _connection.resolve(args)
    except _connection.SettingsError as error:
        return _fail(f"{error} (see 'jobsctl --help')", EXIT_USAGE, None, False)
    for warning in connection.warnings:
        sys.stderr.write(f"jobsctl: warning: {_render.plain(_one_line(warning))}\n")
    client = connection.client()
    try:
        return COMMANDS[args.command](client, args)
    except (UsageError, _schedules.ScheduleUsageError) as error:
        return _fail(f"{error} (see 'jobsctl {args.command} --help')", EXIT_USAGE, None, False)
    except JobsError as error:
        message, code = _explain(error, connection.settings)
        return _fail(message, code, error, args.json)
    except KeyboardInterrupt:
        sys.stderr.write("jobsctl: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `jobsctl list | head`
        return EXIT_OK
    finally:
        client.close()


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point."""
    sys.exit(run(argv))
