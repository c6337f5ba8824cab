"""`jobsctl schedules ...` over FakeJobService: create takes the job's type and input
flags as enqueue does plus --cron/--time-zone or --every, --catchup, --paused; list
shows the period, fire times, last job, skipped count and paused; get, pause,
resume, delete; bad values are one line on stderr with jobsctl's exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from san_jobs.client import ChannelSettings, JobsClient
from san_jobs.client.testing import FakeJobService
from san_jobs.jobsctl import _connection, cli
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.shared.display import format_duration


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeJobService]:
    """jobsctl's run() with its connection going to a fake (its error handling runs)."""
    fake = FakeJobService()

    class Connection(_connection.Connection):
        def client(self) -> JobsClient:
            return fake.client()

    connection = Connection(settings=ChannelSettings.build("in-memory"))
    monkeypatch.setattr(_connection, "resolve", lambda args: connection)
    yield fake


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


CREATE = ["schedules", "create", "card-analysis", "--target-id", "digest", "--text", "t"]


def test_create_with_cron_and_list_it(
    service: FakeJobService, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(
        capsys, *CREATE, "--id", "nightly", "--cron", "0 21 * * *",
        "--time-zone", "Europe/Paris", "--catchup", "1h", "--priority", "5", "--json",
    )  # fmt: skip
    assert code == 0, err
    made = json.loads(out)
    assert made["scheduleId"] == "nightly" and made["cron"] == "0 21 * * *"
    assert made["timeZone"] == "Europe/Paris" and made["catchupWindow"] == "3600s"
    (stored,) = service.schedules
    assert stored.template.card_analysis_input.text == "t"
    assert stored.template.priority == 5 and stored.template.requested_by == "jobsctl"
    assert stored.template.job_type == pb.JOB_TYPE_CARD_ANALYSIS

    job = service.fire_schedule("nightly", period_start=datetime(2026, 12, 4, 20, tzinfo=UTC))
    assert job is not None
    code, out, err = _run(capsys, *CREATE, "--id", "often", "--every", "10m", "--paused")
    assert code == 0, err
    assert "every 10m" in out and "paused: yes" in out

    code, out, err = _run(capsys, "schedules", "list")
    assert code == 0, err
    nightly = next(line for line in out.splitlines() if "nightly" in line)
    assert "cron 0 21 * * * Europe/Paris" in nightly
    assert "2026-12-04T20:00:00Z" in nightly  # the last fire
    assert job.id in nightly
    often = next(line for line in out.splitlines() if "often" in line)
    assert "every 10m" in often and "paused" in often
    for header in ("next fire", "last fire", "last job", "skipped", "paused"):
        assert header in out


def test_get_pause_resume_delete(
    service: FakeJobService, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(capsys, *CREATE, "--id", "s1", "--every", "90s")[0] == 0
    code, out, _ = _run(capsys, "schedules", "get", "s1")
    assert code == 0 and "every 1m30s" in out and "next fire: 20" in out
    code, out, _ = _run(capsys, "schedules", "pause", "s1", "--json")
    assert code == 0 and json.loads(out)["paused"] is True
    assert service.schedules[0].paused
    code, out, _ = _run(capsys, "schedules", "resume", "s1")
    assert code == 0 and "paused: no" in out and not service.schedules[0].paused
    code, out, _ = _run(capsys, "schedules", "delete", "s1")
    assert code == 0 and "deleted schedule s1" in out and service.schedules == []
    code, out, err = _run(capsys, "schedules", "get", "s1")
    assert code == cli.EXIT_NOT_FOUND
    assert err == "jobsctl: error: schedule s1 not found\n"


def test_another_definition_under_the_same_id_is_a_conflict(
    service: FakeJobService, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(capsys, *CREATE, "--id", "s", "--every", "1m")[0] == 0
    assert _run(capsys, *CREATE, "--id", "s", "--every", "1m")[0] == 0  # a retry is fine
    code, _, err = _run(capsys, *CREATE, "--id", "s", "--every", "2m")
    assert code == cli.EXIT_INVALID
    assert "exists with another definition" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("flags", "code", "said"),
    [
        (["--every", "10x"], cli.EXIT_USAGE, "cannot read duration '10x'"),
        (["--every", "soon"], cli.EXIT_USAGE, "cannot read duration"),
        (["--every", "10m", "--cron", "* * * * *"], cli.EXIT_USAGE, "not allowed with"),
        ([], cli.EXIT_USAGE, "one of the arguments --cron --every is required"),
        (["--every", "10m", "--time-zone", "UTC"], cli.EXIT_USAGE, "--time-zone goes with --cron"),
        (
            ["--cron", "0 21 * *"],
            cli.EXIT_INVALID,
            "schedule.cron must be five fields: minute hour",
        ),
        (["--every", "0.5"], cli.EXIT_INVALID, "schedule.interval must be at least 1 s"),
        (
            ["--cron", "0 3 * * *", "--time-zone", "Mars/Olympus"],
            cli.EXIT_INVALID,
            "schedule.time_zone unknown time zone 'Mars/Olympus'",
        ),
    ],
)
def test_bad_periods_are_one_line_without_a_traceback(
    service: FakeJobService,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    code: int,
    said: str,
) -> None:
    got, _, err = _run(capsys, *CREATE, "--id", "bad", *flags)
    assert got == code, err
    assert said in err and "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("jobsctl")  # argparse's usage line may come before it
    if code != cli.EXIT_USAGE:
        assert len(lines) == 1
    assert service.schedules == []


def test_durations_read_back_as_every_takes_them() -> None:
    assert [format_duration(s) for s in (600, 90, 86_400, 5_400, 1.5, 0)] == [
        "10m", "1m30s", "1d", "1h30m", "1.5s", "0s",
    ]  # fmt: skip
