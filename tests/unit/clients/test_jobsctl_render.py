"""jobsctl never hands a terminal a control character from the server: every value it
shows (tables, plain lines, JSON) has them escaped."""

from __future__ import annotations

import io
import json

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console

from san_jobs.jobsctl import _render, cli
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

# ESC [2J clears the screen; CSI (\x9b) is its one-byte C1 form; BEL rings; U+2028
# breaks lines in some terminals and editors.
HOSTILE = "esc-\x1b[2J csi-\x9b2J bel-\x07 nul-\x00 ls-\u2028 [bold]markup[/]"
RAW_CONTROLS = ("\x1b", "\x9b", "\x07", "\x00", "\u2028")


def _stamp(seconds: int) -> Timestamp:
    return Timestamp(seconds=seconds)


def hostile_job(status: pb.JobStatus.ValueType = pb.JOB_STATUS_FAILED) -> pb.Job:
    job = pb.Job(
        id=HOSTILE,
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        status=status,
        target_id=HOSTILE,
        requested_by=HOSTILE,
        attempt_count=1,
        max_attempts=3,
        create_time=_stamp(1_764_576_000),
        update_time=_stamp(1_764_576_001),
        error_code=HOSTILE,
        error_reason=HOSTILE,
        error_message=HOSTILE + "\nsecond line",
        cancel_reason=HOSTILE,
        cancel_time=_stamp(1_764_576_002),
        card_analysis_result=pb.CardAnalysisResult(
            summary=HOSTILE + "\nnext", tags=[HOSTILE], model=HOSTILE
        ),
    )
    job.attempts.append(
        pb.JobAttempt(
            attempt=1,
            start_time=_stamp(1_764_576_000),
            end_time=_stamp(1_764_576_001),
            error_code=HOSTILE,
            error_message=HOSTILE,
        )
    )
    return job


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    # A terminal that renders colours: the escapes rich itself writes are not the
    # server's, so only the server's text is checked below.
    return Console(file=out, highlight=False, width=300, color_system=None), out


def _assert_clean(text: str) -> None:
    for char in RAW_CONTROLS:
        assert char not in text, f"{char!r} reached the terminal: {text!r}"


def test_job_detail_shows_no_control_character() -> None:
    console, out = _console()
    _render.job_detail(console, hostile_job())
    _assert_clean(out.getvalue())
    assert "esc-\\x1b[2J" in out.getvalue()
    assert "[bold]markup[/]" in out.getvalue()  # shown, not obeyed


def test_jobs_table_shows_no_control_character() -> None:
    console, out = _console()
    _render.jobs_table(console, [hostile_job(), hostile_job(pb.JOB_STATUS_COMPLETED)])
    _assert_clean(out.getvalue())


def test_watch_and_history_lines_show_no_control_character() -> None:
    job = hostile_job()
    _assert_clean(_render.watch_line(job))
    for line in _render.history_lines(job):
        _assert_clean(line)


def test_skipped_table_shows_no_control_character() -> None:
    console, out = _console()
    _render.skipped_table(console, [pb.SkippedJob(job_id=HOSTILE, reason=HOSTILE)])
    _assert_clean(out.getvalue())


def test_plain_text_is_escaped() -> None:
    _assert_clean(_render.plain(HOSTILE))
    assert _render.plain("ok 요약") == "ok 요약"


def test_json_carries_no_raw_control_character_and_round_trips(
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = hostile_job()
    _render.print_json(_render.to_dict(job))
    printed = capsys.readouterr().out
    _assert_clean(printed)
    assert "\x85" not in printed and "\x7f" not in printed
    assert json.loads(printed)["cancelReason"] == HOSTILE
    assert "요약" in _json_line({"text": "요약"})  # still readable, not \\uXXXX


def _json_line(value: object) -> str:
    out = io.StringIO()
    _render.print_json(value, stream=out)
    return out.getvalue()


def test_json_escapes_c1_del_and_separators() -> None:
    printed = _json_line({"text": "\x7f\x85\x9b\u2028\u2029\ud800"})
    assert printed == '{"text": "\\u007f\\u0085\\u009b\\u2028\\u2029\\ud800"}\n'


def test_an_error_line_on_stderr_shows_no_control_character(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Error messages quote the server, which may quote what was sent.
    cli._fail(f"job {HOSTILE!s} not found", cli.EXIT_NOT_FOUND, None, False)
    printed = capsys.readouterr().err
    _assert_clean(printed)
    assert printed.count("\n") == 1
