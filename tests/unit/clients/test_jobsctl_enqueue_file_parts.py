"""`jobsctl enqueue-file`'s reading and summary without a server: which lines are
requests, skipped or invalid; batches of at most --batch-size lines from --start-line;
the plain summary's lists cut at 20 with "... and N more"."""

from __future__ import annotations

import io

from san_jobs.jobsctl import _enqueue_tally as tally_
from san_jobs.jobsctl._enqueue_file import parse_line, read_batches
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb


def test_a_line_is_a_request_a_reason_or_skipped() -> None:
    camel = parse_line(b'{"targetId": "a", "cardAnalysisInput": {"text": "t"}}\n')
    snake = parse_line(b'{"target_id": "a", "card_analysis_input": {"text": "t"}}\r\n')
    assert isinstance(camel, pb.EnqueueRequest) and camel == snake
    assert camel.card_analysis_input.text == "t"
    for skipped in (b"\n", b"   \n", b"# a comment\n", b"  # indented comment\n"):
        assert parse_line(skipped) is None
    assert "targetIdd" in str(parse_line(b'{"targetIdd": "a"}'))
    assert isinstance(parse_line(b"{not json"), str)
    assert parse_line(b'{"targetId": "\xff"}') == "not UTF-8 (byte 15)"


def test_batches_count_lines_from_the_start_line() -> None:
    text = b"".join(
        [b"# header\n"] + [b'{"targetId": "t%d"}\n' % i for i in range(2, 8)] + [b"bad\n"]
    )
    batches = list(read_batches(io.BytesIO(text), 3, 2))
    assert [[line for line, _ in b.lines] for b in batches] == [[3, 4], [5, 6], [7, 8]]
    assert [r.target_id for r in batches[0].requests] == ["t3", "t4"]
    assert batches[2].request_lines == [7] and batches[2].lines[1][1] is not None
    assert batches[-1].end_offset == len(text)


def test_the_plain_summary_lists_twenty_problems_of_a_kind() -> None:
    tally = tally_.Tally()
    for line in range(1, 26):
        tally.add(tally_.LineOutcome(line, tally_.INVALID, f"bad \x1b[2J {line}"))
    tally.add(tally_.LineOutcome(26, tally_.REJECTED, "exists", "job-9"))
    tally.add(tally_.LineOutcome(27, tally_.CREATED, "", "job-10"))
    lines = tally_.summary_lines(tally, "f.jsonl", None, 1.0)
    assert lines[1] == "created 1, duplicate 0, invalid 25, rejected as duplicate 1"
    assert "  line 20: bad \\x1b[2J 20" in lines  # control characters shown, not obeyed
    assert "  line 21: bad \\x1b[2J 21" not in lines
    assert "  ... and 5 more" in lines and "  line 26: existing job job-9" in lines
    body = tally_.summary_dict(tally, "f.jsonl", None)
    assert len(body["problems"]) == 26 and body["problemsOmitted"] == 0
