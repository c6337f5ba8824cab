"""jobsctl shows a job whose target holds U+202E RIGHT-TO-LEFT OVERRIDE (stored before
JobService refused it, or sent by an older one) with the override escaped, in every
view: a target cannot make its job's line read "FAILED"."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from san_jobs.jobsctl import _render
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.unit.clients._clients_support import make_job

TARGET = "scrap-\u202eDELIAF\u202c-1"
SHOWN = "scrap-\\u202eDELIAF\\u202c-1"
FORMAT_CHARS = ("\u202e", "\u202c")


def rlo_job() -> pb.Job:
    job = make_job(pb.JOB_STATUS_COMPLETED, target_id=TARGET, summary="A \u2066summary\u2069.")
    job.requested_by = "user-\u200b1"
    return job


def rendered(draw: object) -> str:
    out = io.StringIO()
    console = Console(file=out, highlight=False, width=300, color_system=None)
    draw(console)  # type: ignore[operator]
    return out.getvalue()


def assert_escaped(text: str) -> None:
    for char in (*FORMAT_CHARS, "\u2066", "\u200b"):
        assert char not in text, f"{char!r} reached the terminal: {text!r}"


def test_get_and_list_show_the_override_escaped() -> None:
    detail = rendered(lambda console: _render.job_detail(console, rlo_job()))
    assert_escaped(detail)
    assert SHOWN in detail and "user-\\u200b1" in detail
    table = rendered(lambda console: _render.jobs_table(console, [rlo_job()]))
    assert_escaped(table)
    assert "scrap-\\u202eDELIA" in table  # the column may wrap; the escape is there


def test_watch_and_history_lines_show_it_escaped() -> None:
    failed = make_job(pb.JOB_STATUS_FAILED, attempt=1, target_id=TARGET, error="said \u202eKO")
    lines = [_render.watch_line(failed), *_render.history_lines(failed)]
    for line in lines:
        assert_escaped(line)
    assert any("said \\u202eKO" in line for line in lines), lines
    assert _render.plain(TARGET) == SHOWN


def test_json_escapes_it_and_round_trips(capsys: pytest.CaptureFixture[str]) -> None:
    _render.print_json(_render.to_dict(rlo_job()))
    printed = capsys.readouterr().out
    assert_escaped(printed)
    assert "\\u202e" in printed
    assert json.loads(printed)["targetId"] == TARGET  # exact, for scripts
