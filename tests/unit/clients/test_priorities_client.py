"""Priorities on the client side: the SDK's `priority` on both clients, the fake
keeping it (and refusing what JobService refuses), jobsctl's `enqueue --priority`,
`enqueue-file` at 5 unless told, and `list`/`get` showing it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from san_jobs.client import CardAnalysisInput, InvalidRequestError
from san_jobs.client.testing import FakeJobService
from san_jobs.jobsctl import _render, cli
from san_jobs.jobsctl._enqueue_file import read_batches
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb


def test_the_sync_client_sends_it_and_the_fake_keeps_it() -> None:
    service = FakeJobService()
    with service.client() as client:
        urgent = client.enqueue("now", CardAnalysisInput(text="x"), priority=1).job
        assert urgent.priority == 1
        assert client.get_job(urgent.id).priority == 1
        plain = client.enqueue("plain", CardAnalysisInput(text="x")).job
        assert plain.priority == 3  # 0: the default, shown as JobService shows it


async def test_the_async_client_sends_it() -> None:
    service = FakeJobService()
    async with service.async_client() as client:
        job = (await client.enqueue("a", CardAnalysisInput(text="x"), priority=5)).job
    assert job.priority == 5


def test_the_fake_refuses_a_priority_out_of_range_naming_it() -> None:
    service = FakeJobService()
    with service.client() as client, pytest.raises(InvalidRequestError) as caught:
        client.enqueue("bad", CardAnalysisInput(text="x"), priority=6)
    assert [v.field for v in caught.value.field_violations] == ["priority"]


def _enqueue(*flags: str) -> pb.Job:
    args = cli.build_parser().parse_args(
        ["enqueue", "card-analysis", "--target-id", "t", "--text", "x", "--json", *flags]
    )
    service = FakeJobService()
    with service.client() as client:
        assert cli.cmd_enqueue(client, args) == 0
        (job,) = client.list_jobs().jobs
    return job


def test_jobsctl_enqueue_priority(capsys: pytest.CaptureFixture[str]) -> None:
    assert _enqueue("--priority", "1").priority == 1
    assert _enqueue().priority == 3


@pytest.mark.parametrize("value", ["0", "6", "urgent"])
def test_jobsctl_refuses_a_bad_priority_without_a_traceback(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--insecure", "enqueue", "card-analysis", "--target-id", "t", "--text", "x"]
    assert cli.run([*argv, "--priority", value]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--priority" in err, err


def _enqueue_file(tmp_path: Path, *flags: str) -> dict[str, int]:
    path = tmp_path / "jobs.jsonl"
    path.write_text(
        '{"targetId": "a", "cardAnalysisInput": {"text": "t"}}\n'
        '{"targetId": "b", "cardAnalysisInput": {"text": "t"}, "priority": 2}\n'
    )
    args = cli.build_parser().parse_args(["enqueue-file", str(path), "--json", *flags])
    service = FakeJobService()
    with service.client() as client:
        assert cli.cmd_enqueue_file(client, args) == 0
        return {job.target_id: job.priority for job in client.list_jobs().jobs}


def test_enqueue_file_defaults_to_5_and_the_flag_changes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A line's own priority is kept; the others get the file's.
    assert _enqueue_file(tmp_path) == {"a": 5, "b": 2}
    assert _enqueue_file(tmp_path, "--priority", "3") == {"a": 3, "b": 2}


def test_read_batches_fills_in_only_a_missing_priority() -> None:
    text = b'{"targetId": "a"}\n{"targetId": "b", "priority": 1}\n'
    (batch,) = read_batches(io.BytesIO(text), 1, 10, priority=5)
    assert [r.priority for r in batch.requests] == [5, 1]


def test_list_and_get_show_the_priority() -> None:
    job = pb.Job(id="j1", status=pb.JOB_STATUS_PENDING, target_id="t", priority=1)
    out = io.StringIO()
    _render.jobs_table(Console(file=out, width=200, color_system=None), [job])
    header, row = out.getvalue().splitlines()[1], out.getvalue().splitlines()[3]
    column = header.index("pri")
    assert row[column : column + 3].strip() == "1"
    out = io.StringIO()
    _render.job_detail(Console(file=out, width=200, color_system=None), job)
    assert any(line.split() == ["priority", "1"] for line in out.getvalue().splitlines())
