"""jobsctl's value parsing and command line, without a server."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.jobsctl import cli
from san_jobs.jobsctl._values import (
    format_age,
    parse_job_type,
    parse_since,
    parse_status,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.shared.display import format_time

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", NOW - timedelta(minutes=30)),
        ("1h", NOW - timedelta(hours=1)),
        ("2d", NOW - timedelta(days=2)),
        ("45s", NOW - timedelta(seconds=45)),
        ("1w", NOW - timedelta(weeks=1)),
        ("2026-11-29T10:00:00Z", datetime(2026, 11, 29, 10, tzinfo=UTC)),
        ("2026-11-29T10:00:00+09:00", datetime(2026, 11, 29, 1, tzinfo=UTC)),
    ],
)
def test_parse_since(text: str, expected: datetime) -> None:
    assert parse_since(text, now=NOW) == expected


def test_parse_since_rejects_nonsense() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="cannot read time"):
        parse_since("yesterday")


def test_enum_names() -> None:
    assert parse_job_type("card-analysis") == pb.JOB_TYPE_CARD_ANALYSIS
    assert parse_job_type("TIL_GENERATION") == pb.JOB_TYPE_TIL_GENERATION
    assert parse_job_type("job_type_recall_generation") == pb.JOB_TYPE_RECALL_GENERATION
    assert parse_status("Failed") == pb.JOB_STATUS_FAILED
    for bad in ("unspecified", "nope"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_job_type(bad)
        with pytest.raises(argparse.ArgumentTypeError):
            parse_status(bad)


def test_formatting() -> None:
    assert format_time(Timestamp()) == "-"
    stamp = Timestamp()
    stamp.FromDatetime(datetime(2026, 11, 29, 12, 0, 1))
    assert format_time(stamp) == "2026-11-29T12:00:01Z"
    assert [format_age(s) for s in (12, 250, 7500, 90000)] == ["12s", "4m 10s", "2h 5m", "1d 1h"]


def test_json_flag_goes_before_or_after_the_subcommand() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["--json", "stats"]).json is True
    assert parser.parse_args(["stats", "--json"]).json is True
    assert parser.parse_args(["stats"]).json is False


def test_target_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAN_JOBSCTL_TARGET", "jobs.internal:6000")
    assert cli.build_parser().parse_args(["stats"]).target == "jobs.internal:6000"
    monkeypatch.delenv("SAN_JOBSCTL_TARGET")
    assert cli.build_parser().parse_args(["stats"]).target == "127.0.0.1:50051"


def test_usage_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["get"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "JOB_ID" in err


def test_retry_refuses_over_100_without_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    args = argparse.Namespace(yes=False)
    assert cli._confirm(100, args)
    monkeypatch.setattr("sys.stdin", None)
    with pytest.raises(cli.UsageError, match="--yes"):
        cli._confirm(101, args)
    assert cli._confirm(101, argparse.Namespace(yes=True))


def test_a_completed_jobs_old_failure_is_history_not_an_error() -> None:
    from io import StringIO

    from _clients_support import make_job
    from rich.console import Console

    from san_jobs.jobsctl import _render

    done = make_job(pb.JOB_STATUS_COMPLETED, attempt=2, error="AI gateway unavailable: x")
    failed = make_job(pb.JOB_STATUS_FAILED, attempt=3, error="AI gateway unavailable: y")
    assert "unavailable" not in _render.watch_line(done)
    assert _render.watch_line(failed).endswith("AI gateway unavailable: y")
    out = StringIO()
    _render.jobs_table(Console(file=out, width=250, color_system=None), [done, failed])
    text = out.getvalue()
    assert "earlier: AI gateway unavailable: x" in text
    assert "earlier: AI gateway unavailable: y" not in text
    assert "AI gateway unavailable: y" in text


class _Watching:
    """The one client method `cmd_watch` calls, answering a fixed run of updates."""

    def __init__(self, updates: list[pb.Job]) -> None:
        self.updates = updates

    def watch(self, job_id: str, timeout: float | None) -> list[pb.Job]:
        return self.updates


def test_watch_prints_a_line_per_state_not_per_pause_move(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def pending(until_seconds: int, *, reason: int = pb.PAUSE_REASON_CIRCUIT_OPEN) -> pb.Job:
        job = pb.Job(id="j1", status=pb.JOB_STATUS_PENDING, attempt_count=1, max_attempts=5)
        job.update_time.FromSeconds(1_800_000_000)
        job.waiting_for.reason = reason
        job.waiting_for.since.FromSeconds(1_800_000_000)
        job.waiting_for.until.FromSeconds(until_seconds)
        return job

    # Through an outage the pause's next try moves every few seconds; the job does not.
    moving = [pending(1_800_000_005 + 5 * i) for i in range(4)]
    throttled = pending(1_800_000_100, reason=pb.PAUSE_REASON_RATE_LIMITED)
    done = pb.Job(id="j1", status=pb.JOB_STATUS_COMPLETED, attempt_count=2, max_attempts=5)
    done.update_time.FromSeconds(1_800_000_200)
    args = argparse.Namespace(job_id="j1", wait_timeout=None, json=False)
    client = _Watching([*moving, throttled, done])
    assert cli.cmd_watch(client, args) == cli.EXIT_OK  # type: ignore[arg-type]
    lines = [line for line in capsys.readouterr().out.splitlines() if "attempt" in line]
    assert [line.split()[1] for line in lines] == ["PENDING", "PENDING", "COMPLETED"]
    assert "unavailable" in lines[0] and "rate limiting" in lines[1]

    # --json: every update, as it came.
    args.json = True
    cli.cmd_watch(client, args)  # type: ignore[arg-type]
    assert capsys.readouterr().out.count('"status"') == 6
