"""Delayed jobs on the client side: the SDK's schedule_time, the fake keeping it,
jobsctl's `enqueue --at/--in` and `list` showing when a waiting job is due."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console

from san_jobs.client import CardAnalysisInput
from san_jobs.client._requests import enqueue_request
from san_jobs.client.testing import FakeJobService
from san_jobs.jobsctl import _render, cli
from san_jobs.jobsctl._values import parse_at, parse_delay
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

WHEN = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_the_request_builder_sets_schedule_time_only_when_given() -> None:
    def build(**kwargs: object) -> pb.EnqueueRequest:
        return enqueue_request(
            "t",
            CardAnalysisInput(text="x"),
            job_type=None,
            requested_by="",
            request_id=None,
            max_attempts=0,
            return_existing=False,
            **kwargs,  # type: ignore[arg-type]
        )

    assert not build().HasField("schedule_time")
    assert build(schedule_time=WHEN).schedule_time.ToDatetime(tzinfo=UTC) == WHEN
    naive = build(schedule_time=WHEN.replace(tzinfo=None))  # naive: UTC
    assert naive.schedule_time.ToDatetime(tzinfo=UTC) == WHEN


def test_both_clients_send_it_and_the_fake_keeps_it() -> None:
    service = FakeJobService()
    with service.client() as client:
        job = client.enqueue("later", CardAnalysisInput(text="x"), schedule_time=WHEN).job
        assert job.schedule_time.ToDatetime(tzinfo=UTC) == WHEN
        assert client.get_job(job.id).schedule_time == job.schedule_time
        plain = client.enqueue("now", CardAnalysisInput(text="x")).job
        assert not plain.HasField("schedule_time")


async def test_the_async_client_sends_it() -> None:
    service = FakeJobService()
    async with service.async_client() as client:
        job = (await client.enqueue("a", CardAnalysisInput(text="x"), schedule_time=WHEN)).job
    assert job.schedule_time.ToDatetime(tzinfo=UTC) == WHEN


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800), ("1d12h", 129600), ("45", 45)],
)
def test_durations_read_as_the_service_writes_them(text: str, seconds: int) -> None:
    assert parse_delay(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "10x", "-5m", "m", "1.5h", "soon"])
def test_a_bad_duration_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="cannot read duration"):
        parse_delay(text)


def test_times_are_rfc_3339() -> None:
    assert parse_at("2030-01-02T03:04:05Z") == WHEN
    assert parse_at("2030-01-02T12:04:05+09:00") == WHEN
    with pytest.raises(argparse.ArgumentTypeError, match="RFC 3339"):
        parse_at("tomorrow")


def _enqueue(*flags: str) -> pb.Job:
    args = cli.build_parser().parse_args(
        ["enqueue", "card-analysis", "--target-id", "t", "--text", "x", "--json", *flags]
    )
    service = FakeJobService()
    with service.client() as client:
        assert cli.cmd_enqueue(client, args) == 0
        (job,) = client.list_jobs().jobs
    return job


def test_jobsctl_enqueue_at_and_in(capsys: pytest.CaptureFixture[str]) -> None:
    assert _enqueue("--at", "2030-01-02T03:04:05Z").schedule_time.ToDatetime(tzinfo=UTC) == WHEN
    before = datetime.now(UTC)
    due = _enqueue("--in", "10m").schedule_time.ToDatetime(tzinfo=UTC)
    assert before + timedelta(minutes=10) <= due <= datetime.now(UTC) + timedelta(minutes=10)
    assert not _enqueue().HasField("schedule_time")


@pytest.mark.parametrize(
    "flags",
    [["--at", "tomorrow"], ["--in", "10x"], ["--at", "2030-01-02T03:04:05Z", "--in", "10m"]],
)
def test_jobsctl_refuses_bad_or_both_flags_without_a_traceback(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--insecure", "enqueue", "card-analysis", "--target-id", "t", "--text", "x", *flags]
    assert cli.run(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("not allowed with" in err) or ("cannot read" in err), err


def test_list_shows_when_a_waiting_job_is_due() -> None:
    stamp = Timestamp()
    stamp.FromDatetime(WHEN)
    waiting = pb.Job(id="j1", status=pb.JOB_STATUS_PENDING, target_id="t")
    waiting.next_attempt_time.CopyFrom(stamp)
    waiting.schedule_time.CopyFrom(stamp)
    out = io.StringIO()
    _render.jobs_table(Console(file=out, width=200, color_system=None), [waiting])
    assert f"due {_render.format_time(stamp)}" in out.getvalue()
    done = pb.Job(id="j2", status=pb.JOB_STATUS_COMPLETED, target_id="t")
    done.schedule_time.CopyFrom(stamp)
    out = io.StringIO()
    _render.jobs_table(Console(file=out, width=200, color_system=None), [done])
    assert "due" not in out.getvalue()
