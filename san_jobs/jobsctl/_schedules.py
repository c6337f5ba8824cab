"""``jobsctl schedules list|create|get|delete|pause|resume``: JobService's schedules.

``create TYPE`` takes the job's type and input flags exactly as ``enqueue TYPE`` does
(the same subcommands, built by _job_inputs), plus the schedule's own: ``--id``,
``--cron EXPR [--time-zone ZONE]`` or ``--every DURATION``, ``--catchup DURATION``,
``--paused``. A rich table or lines for people, ``--json`` for scripts; errors are
jobsctl's usual one-line messages and exit codes (an unknown schedule is 3, a bad
cron or interval or another definition under the same id is 4).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from san_jobs.client import JobsClient
from san_jobs.jobsctl import _render
from san_jobs.jobsctl._job_inputs import InputError, add_enqueue_commands, enqueue_input
from san_jobs.jobsctl._values import parse_delay, parse_priority, positive_int
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.shared.display import format_duration, format_time, job_type_name, period_text

HELP = "periodic jobs: list, create, get, delete, pause, resume"


class ScheduleUsageError(Exception):
    """Flags that make no schedule (jobsctl reports it as a usage error)."""


def _json_flag(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS, as jobsctl's other --json flags: it may go before or after the command.
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )


def _named(actions: Any, name: str, help_text: str) -> None:
    parser = actions.add_parser(name, help=help_text)
    parser.add_argument("schedule_id", metavar="SCHEDULE_ID")
    _json_flag(parser)


def add_parser(commands: Any) -> None:
    """Add ``schedules`` to jobsctl's sub-commands (``commands``: argparse's subparsers)."""
    schedules = commands.add_parser("schedules", help=HELP)
    _json_flag(schedules)
    actions = schedules.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="the schedules, by id, with their fire times")
    listing.add_argument("--page-size", type=positive_int, default=0, metavar="N")
    _json_flag(listing)

    create = actions.add_parser("create", help="store a schedule of a job TYPE")
    _json_flag(create)
    kinds = create.add_subparsers(dest="kind", metavar="TYPE", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--id", dest="schedule_id", required=True, metavar="ID",
        help="the schedule's name: 1 to 128 letters, digits, '.', '_', '-', ':'",
    )  # fmt: skip
    period = common.add_mutually_exclusive_group(required=True)
    period.add_argument(
        "--cron", default=None, metavar="EXPR",
        help="five-field crontab, e.g. '0 21 * * *' (read in --time-zone)",
    )  # fmt: skip
    period.add_argument(
        "--every", type=parse_delay, default=None, metavar="DURATION",
        help="a fixed interval, at least 1s: 90s, 10m, 12h, 7d",
    )  # fmt: skip
    common.add_argument(
        "--time-zone", default="", metavar="ZONE",
        help="IANA time zone of --cron, e.g. Europe/Paris (default UTC)",
    )  # fmt: skip
    common.add_argument(
        "--catchup", type=parse_delay, default=None, metavar="DURATION",
        help="fire periods missed while no JobService ran if they began this recently",
    )  # fmt: skip
    common.add_argument("--paused", action="store_true", help="create it paused")
    common.add_argument("--target-id", required=True, metavar="ID", help="what the jobs are about")
    common.add_argument("--requested-by", default="jobsctl", help="who asks (default jobsctl)")
    common.add_argument("--max-attempts", type=positive_int, default=0, metavar="N")
    common.add_argument(
        "--priority", type=parse_priority, default=0, metavar="N",
        help="the jobs' priority: 1 (most urgent) to 5 (least); default 3",
    )  # fmt: skip
    _json_flag(common)
    add_enqueue_commands(kinds, common)  # the same TYPE subcommands and input flags

    _named(actions, "get", "show one schedule")
    _named(actions, "delete", "remove a schedule (its jobs stay)")
    _named(actions, "pause", "stop a schedule firing")
    _named(actions, "resume", "let a paused schedule fire again")


def cmd_schedules(client: JobsClient, args: argparse.Namespace) -> int:
    if args.action == "list":
        schedules = list(client.iter_schedules(page_size=args.page_size))
        if args.json:
            _render.print_json({"schedules": [_render.to_dict(s) for s in schedules]})
        elif schedules:
            schedules_table(_render.make_console(), schedules)
        else:
            _render.make_console().print("no schedules")
        return 0
    if args.action == "delete":
        client.delete_schedule(args.schedule_id)
        if args.json:
            _render.print_json({"deleted": args.schedule_id})
        else:
            print(f"deleted schedule {_render.plain(args.schedule_id)}", flush=True)
        return 0
    if args.action == "create":
        schedule = _create(client, args)
    elif args.action == "get":
        schedule = client.get_schedule(args.schedule_id)
    elif args.action == "pause":
        schedule = client.pause_schedule(args.schedule_id)
    else:
        schedule = client.resume_schedule(args.schedule_id)
    if args.json:
        _render.print_json(_render.to_dict(schedule))
    else:
        schedule_detail(_render.make_console(), schedule)
    return 0


def _create(client: JobsClient, args: argparse.Namespace) -> pb.Schedule:
    if args.time_zone and args.cron is None:
        raise ScheduleUsageError("--time-zone goes with --cron (an interval has no time zone)")
    try:
        job_input = enqueue_input(args)
    except InputError as error:
        raise ScheduleUsageError(str(error)) from None
    return client.create_schedule(
        args.schedule_id,
        args.target_id,
        job_input,
        cron=args.cron,
        time_zone=args.time_zone,
        interval=args.every,
        catchup_window=args.catchup,
        paused=args.paused,
        requested_by=args.requested_by,
        max_attempts=args.max_attempts,
        priority=args.priority,
    )


def schedules_table(console: Console, schedules: list[pb.Schedule]) -> None:
    table = Table("id", "period", "next fire", "last fire", "last job", "skipped", "paused", "job")
    table.columns[0].no_wrap = True
    for schedule in schedules:
        table.add_row(
            _render.markup_text(schedule.schedule_id),
            _render.markup_text(period_text(schedule)),
            "-" if schedule.paused else format_time(schedule.next_fire_time),
            format_time(schedule.last_fire_time),
            _render.markup_text(schedule.last_job_id) or "-",
            f"{schedule.skipped_count:,}",
            # A schedule JobService holds (its owner's token revoked) says so in detail.
            ("[yellow]held[/]" if schedule.paused_reason else "[yellow]paused[/]")
            if schedule.paused
            else "no",
            f"{job_type_name(schedule.template.job_type)} "
            f"{_render.markup_text(schedule.template.target_id)}",
        )
    console.print(table)


def paused_text(schedule: pb.Schedule) -> str:
    """ "no", "yes", or why JobService holds it (Schedule.paused_reason)."""
    if not schedule.paused:
        return "no"
    return f"yes: {schedule.paused_reason}" if schedule.paused_reason else "yes"


def schedule_detail(console: Console, schedule: pb.Schedule) -> None:
    template = schedule.template
    rows = [
        ("schedule", schedule.schedule_id),
        ("period", period_text(schedule)),
        ("paused", paused_text(schedule)),
        ("next fire", "-" if schedule.paused else format_time(schedule.next_fire_time)),
        ("last fire", format_time(schedule.last_fire_time)),
        ("last job", schedule.last_job_id or "-"),
        ("skipped", f"{schedule.skipped_count:,}"),
        ("catch-up", format_duration(schedule.catchup_window.ToNanoseconds() / 1e9)),
        ("job", f"{job_type_name(template.job_type)} target {template.target_id}"),
        ("created", format_time(schedule.create_time)),
        ("by", schedule.requested_by or "-"),
    ]
    for label, text in rows:
        console.print(f"[bold]{label}[/]: {_render.markup_text(text)}")
