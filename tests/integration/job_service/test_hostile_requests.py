"""Property-based (hypothesis): every JobService RPC, fed generated hostile requests,
answers OK or a code that is the caller's to act on, and keeps serving.

Real parts: JobService in-process on a loopback port, on SQLite and on PostgreSQL
(the `service` fixture of conftest.py), with the scripted gateway. Hypothesis drives a
plain (sync) gRPC client from a worker thread while the server runs on the test's
event loop.

Each answer is recorded rather than asserted on the spot, so one run shows every kind
of wrong answer at once (the assertion at the end lists them, one example each), and
the run's size is fixed: derandomized, so CI runs the same examples every time.

Hostile means: NUL and other control characters, lone surrogates (which no protobuf
library will serialize: they are written into the wire bytes by hand, as a broken
client would send them), text that looks like SQL, JSON or LIKE patterns, lengths up
to past the message limit, counts up to 40,000, every int32, timestamps from year -292
billion to +292 billion and nanos outside [0, 1e9), enum numbers that name nothing,
and undecodable request bytes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import DecodeError, Message
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from san_jobs.job_service.auth.roles import Role
from san_jobs.job_service.domain.dependencies import MAX_DEPENDENCY_DEPTH
from san_jobs.job_service.domain.limits import (
    DEFAULT_MAX_TEXT_CHARS,
    MAX_RECALL_SOURCES,
    MAX_TIL_NOTES,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Fail, Hang
from tests.integration.job_service.test_auth_roles import add_token, bearer
from tests.support.jobs_api import card_request, wait_terminal

# The answers a caller may get: OK, or a code that says what the caller did wrong.
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    # PruneJobs while the server's own pruner runs: "a prune is running", retry later.
    grpc.StatusCode.ABORTED,
}
# Text that must never reach a caller in an error message: driver, SQL, stack, paths.
LEAKS = (
    "Traceback",
    'File "',
    "SELECT ",
    "INSERT ",
    "UPDATE ",
    "[SQL:",
    "sqlalchemy",
    "asyncpg",
    "sqlite",
    "postgresql://",
    "Error:",
)
# An error message longer than this echoes what it was sent.
MAX_MESSAGE_CHARS = 2_000

# Examples per RPC (each run on SQLite and again on PostgreSQL).
EXAMPLES = {
    "Enqueue": 240,
    "BatchEnqueue": 60,
    "GetJob": 80,
    "ListJobs": 120,
    "CancelJob": 80,
    "RetryFailed": 120,
    "GetJobStats": 20,
    "StreamJobUpdates": 60,
    "StreamJobChanges": 60,
    "GetUsage": 60,
    "ListFailureGroups": 60,
    "PruneJobs": 20,
    "CreateSchedule": 120,
    "GetSchedule": 20,
    "ListSchedules": 20,
    "DeleteSchedule": 20,
    "PauseSchedule": 20,
    "ResumeSchedule": 20,
}
CALL_TIMEOUT = 30.0
STREAM_RESPONSES: dict[str, type[Message]] = {
    "StreamJobUpdates": pb.StreamJobUpdatesResponse,
    "StreamJobChanges": pb.StreamJobChangesResponse,
}
# A live feed (no job_ids) that has not failed within this long is serving.
FEED_PEEK_SECONDS = 0.1

# Stands for a lone surrogate: protobuf refuses to serialize one, so requests carry
# this (unused) code point and the wire bytes get a UTF-8-encoded U+D800 in its place.
SURROGATE_MARK = "\U0010fffe"
_MARK_BYTES = SURROGATE_MARK.encode()
_SURROGATE_BYTES = b"\xed\xa0\x80?"  # same length, so no length prefix changes

HUGE_LENGTHS = (257, 1_001, 100_001, 1_100_000, 4_300_000)
HUGE_COUNTS = (1_001, 40_000)


def _wire(request: Any) -> bytes:
    """A request's wire bytes (with lone surrogates put in), or raw bytes as given."""
    if isinstance(request, bytes):
        return request
    assert isinstance(request, Message)
    return request.SerializeToString().replace(_MARK_BYTES, _SURROGATE_BYTES)


# -- strategies ------------------------------------------------------------------

SPECIAL_STRINGS = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "\x00" * 300,
    "\n",
    "user\nERROR forged log line",
    "\r\n\t\x0b\x0c",
    "\x1b[2J\x1b[31mred",
    "\x7f\x80\x9f",
    "\u202eevil",
    "\ufeffbom",
    "\u2028\u2029",
    "🙂" * 10,
    "한국어 텍스트",
    SURROGATE_MARK,
    f"a{SURROGATE_MARK}b",
    "'; DROP TABLE async_jobs; --",
    "%",
    "_",
    "\\",
    "%_\\%",
    "null",
    '{"a": [1, {"b": null}]}',
    "2026-11-29",
    "0001-01-01",
    "9999-12-31",
    "0000-00-00",
    "2026-02-30",
)

_any_char = st.characters(exclude_categories=["Cs"], exclude_characters=SURROGATE_MARK)
_control_char = st.characters(max_codepoint=0x9F).filter(lambda c: c < " " or c >= "\x7f")


# The strategy builders are cached: each draw of a composite below used to build its
# strategies anew, and Hypothesis worked out each new object's properties again (a
# third of the run's CPU). The same objects draw the same examples.
@cache
def short_text() -> st.SearchStrategy[str]:
    """Short strings a careless or hostile caller might send."""
    return st.one_of(
        st.sampled_from(SPECIAL_STRINGS),
        st.text(_any_char, max_size=30),
        st.text(_control_char, min_size=1, max_size=10),
    )


@cache
def schedule_ids() -> st.SearchStrategy[str]:
    """Valid ids (some of them stored) and hostile text."""
    return st.one_of(st.sampled_from(["s-1", "s-2", "a.b:c-d_e"]), hostile_text())


@cache
def durations() -> st.SearchStrategy[Duration]:
    """Any Duration the wire can carry, valid or not."""
    return st.builds(
        Duration,
        seconds=st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-10, 400 * 86400)),
        nanos=st.integers(-(2**31), 2**31 - 1),
    )


@st.composite
def schedule_requests(draw: st.DrawFn, pool: Pool) -> pb.CreateScheduleRequest:
    """Random Schedules: any id, cron text or interval, zone, template, window."""
    fields: dict[str, Any] = {
        "schedule_id": draw(schedule_ids()),
        "time_zone": draw(st.one_of(st.sampled_from(["", "UTC", "Europe/Paris"]), hostile_text())),
        "paused": draw(st.booleans()),
    }
    period = draw(st.sampled_from(["cron", "interval", "none"]))
    if period == "cron":
        fields["cron"] = draw(
            st.one_of(st.sampled_from(["*/5 * * * *", "30 2 * * *"]), hostile_text())
        )
    elif period == "interval":
        fields["interval"] = draw(durations())
    if draw(st.booleans()):
        fields["catchup_window"] = draw(durations())
    if draw(st.booleans()):
        fields["template"] = draw(enqueue_requests(pool))
    return pb.CreateScheduleRequest(schedule=pb.Schedule(**fields))


@cache
def hostile_text() -> st.SearchStrategy[str]:
    """Mostly short hostile strings; now and then one character repeated up to past
    the message limit (one_of picks its branches alike: the short ones come 5 times)."""
    huge = st.one_of(
        st.just("[" * 10_000),
        st.tuples(st.sampled_from(HUGE_LENGTHS), st.sampled_from("x\x00한")).map(
            lambda n_c: n_c[1] * n_c[0]
        ),
    )
    return st.one_of(*[short_text()] * 5, huge)


def ids(pool: Sequence[str], *, short: bool = False) -> st.SearchStrategy[str]:
    """Job ids: ones that exist, well-formed unknown ones in every spelling uuid.UUID
    accepts, and hostile strings (only short ones with `short`)."""
    text = short_text() if short else hostile_text()
    return st.one_of(
        st.sampled_from(pool),
        st.sampled_from(pool),
        st.uuids().map(str),
        st.uuids().map(lambda u: u.hex.upper()),
        st.uuids().map(lambda u: "{" + str(u) + "}"),
        st.uuids().map(lambda u: f"urn:uuid:{u}"),
        st.sampled_from(pool).map(lambda i: i + "\x00"),
        text,
    )


def many(
    element: st.SearchStrategy[Any], repeated: st.SearchStrategy[Any] | None = None
) -> st.SearchStrategy[list[Any]]:
    """Short lists of `element`, or one `repeated` (a small one: 40,000 huge strings
    would not fit in memory) repeated a huge number of times."""
    return st.one_of(
        *[st.lists(element, max_size=4)] * 3,
        st.tuples(element if repeated is None else repeated, st.sampled_from(HUGE_COUNTS)).map(
            lambda e_n: [e_n[0]] * e_n[1]
        ),
    )


INT32_EDGES = (-(2**31), -1, 0, 1, 2, 5, 20, 21, 1_000, 1_001, 10_000, 10_001, 2**31 - 1)


@cache
def int32s() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(INT32_EDGES), st.integers(-(2**31), 2**31 - 1))


@cache
def enums(valid: Sequence[int]) -> st.SearchStrategy[int]:
    """Mostly valid enum numbers; also 0 (UNSPECIFIED) and numbers that name nothing."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), int32s())


SECONDS_EDGES = (
    -(2**63),
    -62_135_596_801,  # 0000-12-31T23:59:59Z
    -62_135_596_800,  # 0001-01-01T00:00:00Z
    -1,
    0,
    1_780_000_000,
    253_402_300_799,  # 9999-12-31T23:59:59Z
    253_402_300_800,
    2**63 - 1,
)
NANOS_EDGES = (-(2**31), -1, 0, 999_999_999, 1_000_000_000, 2**31 - 1)


@cache
def timestamps() -> st.SearchStrategy[Timestamp | None]:
    return st.one_of(
        st.none(),
        st.builds(
            Timestamp,
            seconds=st.one_of(st.sampled_from(SECONDS_EDGES), st.integers(-(2**63), 2**63 - 1)),
            nanos=st.one_of(st.sampled_from(NANOS_EDGES), st.integers(-(2**31), 2**31 - 1)),
        ),
    )


JOB_TYPES = tuple(v for v in pb.JobType.values() if v != pb.JOB_TYPE_UNSPECIFIED)
STATUSES = tuple(v for v in pb.JobStatus.values() if v != pb.JOB_STATUS_UNSPECIFIED)


@cache
def _card() -> st.SearchStrategy[dict[str, Any]]:
    text = st.one_of(st.just("A page about queues. Workers take jobs."), hostile_text())
    return st.fixed_dictionaries(
        {
            "card_analysis_input": st.builds(
                pb.CardAnalysisInput, text=text, url=hostile_text(), title=hostile_text()
            )
        }
    )


@cache
def _til() -> st.SearchStrategy[dict[str, Any]]:
    day = st.one_of(st.dates().map(lambda d: d.isoformat()), hostile_text())
    notes = st.one_of(st.just(["a note"]), many(hostile_text(), short_text()))
    return st.fixed_dictionaries(
        {"til_generation_input": st.builds(pb.TilGenerationInput, day=day, notes=notes)}
    )


@cache
def _recall() -> st.SearchStrategy[dict[str, Any]]:
    source = st.builds(
        pb.RecallSource,
        title=hostile_text(),
        text=hostile_text(),
        job_id=st.one_of(st.just(""), hostile_text()),
    )
    small = st.builds(pb.RecallSource, title=short_text(), text=short_text())
    return st.fixed_dictionaries(
        {
            "recall_generation_input": st.builds(
                pb.RecallGenerationInput, sources=many(source, small), question_count=int32s()
            )
        }
    )


_INPUT_OF = {
    pb.JOB_TYPE_CARD_ANALYSIS: _card,
    pb.JOB_TYPE_TIL_GENERATION: _til,
    pb.JOB_TYPE_RECALL_GENERATION: _recall,
}


@st.composite
def enqueue_requests(draw: st.DrawFn, pool: Pool) -> pb.EnqueueRequest:
    """A well-formed request (so it reaches storage) with one to three fields made
    hostile; the input may also be another type's, or missing."""
    job_type = draw(enums(JOB_TYPES))
    hostile = draw(st.sets(st.sampled_from(_ENQUEUE_FIELDS), min_size=1, max_size=3))
    matching = _INPUT_OF.get(job_type, _card)
    inputs = [_card(), _til(), _recall(), st.just({})]
    given_input = draw(
        st.one_of(*[matching()] * 3, *inputs) if "input" in hostile else _benign_input(job_type)
    )
    fields = {
        "target_id": st.one_of(st.sampled_from(pool.targets), hostile_text()),
        "requested_by": hostile_text(),
        # And a schedule period's (JobService's own: refused, issue 42).
        "request_id": st.one_of(
            st.sampled_from(("rid-1", "rid-2", "schedule:s:2026-12-07T03:00:00Z")), hostile_text()
        ),
        "max_attempts": int32s(),
        "on_duplicate": enums(tuple(pb.OnDuplicate.values())),
        # Edges of the Timestamp range, and times around the one-year bound.
        "schedule_time": st.one_of(timestamps(), _around_a_year_ahead()),
        # Mostly the edges of 0..5 (the valid range and just past it), and any int32.
        "priority": st.one_of(st.integers(-1, 6), st.integers(-1, 6), int32s()),
        # Real jobs (of any type and status), unknown UUIDs, junk, repeats, past 100.
        "depends_on": st.one_of(
            many(
                st.one_of(st.sampled_from(pool.job_ids), st.uuids().map(str), hostile_text()),
                st.sampled_from(pool.job_ids),
            ),
            st.sampled_from(pool.job_ids).map(lambda job_id: [job_id] * 101),
            # All the big results at once: merged, far more than an Enqueue may send.
            st.just(pool.big),
        ),
    }
    chosen = {name: draw(fields[name]) for name in hostile if name in fields}
    return pb.EnqueueRequest(
        job_type=job_type,
        target_id=chosen.pop("target_id", f"t-{draw(st.integers(0, 10**9))}"),
        **chosen,
        **given_input,
    )


def batch_enqueue_requests(pool: Pool) -> st.SearchStrategy[pb.BatchEnqueueRequest]:
    """A few hostile Enqueue requests in one batch (an empty batch too), or one small
    request repeated up to past the limit of 1,000 (a small one: each repeat is a copy,
    and 5,000 copies of a 4 MB item would not fit in memory)."""
    items = enqueue_requests(pool)
    small = st.builds(card_request, short_text(), short_text())
    return st.one_of(
        *[st.lists(items, max_size=6)] * 3,
        st.tuples(small, st.sampled_from((1_000, 1_001, 5_000))).map(lambda e_n: [e_n[0]] * e_n[1]),
    ).map(lambda requests: pb.BatchEnqueueRequest(requests=requests))


_ENQUEUE_FIELDS = (
    "input",
    "target_id",
    "requested_by",
    "request_id",
    "max_attempts",
    "on_duplicate",
    "schedule_time",
    "priority",
    "depends_on",
)


# Fixed once: a strategy must draw the same from the same choices (hypothesis replays).
_STARTED = int(time.time())


@cache
def _around_a_year_ahead() -> st.SearchStrategy[Timestamp]:
    """Times from now to a little past the one-year bound on schedule_time."""
    return st.builds(Timestamp, seconds=st.integers(_STARTED - 60, _STARTED + 367 * 86_400))


@cache
def _benign_input(job_type: int) -> st.SearchStrategy[dict[str, Any]]:
    if job_type == pb.JOB_TYPE_TIL_GENERATION:
        value: Message = pb.TilGenerationInput(day="2026-11-29", notes=["a note"])
        return st.just({"til_generation_input": value})
    if job_type == pb.JOB_TYPE_RECALL_GENERATION:
        value = pb.RecallGenerationInput(sources=[pb.RecallSource(title="t", text="A text.")])
        return st.just({"recall_generation_input": value})
    return st.just({"card_analysis_input": pb.CardAnalysisInput(text="A page about queues.")})


def usage_requests() -> st.SearchStrategy[pb.GetUsageRequest]:
    return st.builds(
        lambda start, end, types: pb.GetUsageRequest(
            start_time=start, end_time=end, job_types=types
        ),
        start=timestamps(),
        end=timestamps(),
        types=many(enums(JOB_TYPES)),
    )


def failure_group_requests() -> st.SearchStrategy[pb.ListFailureGroupsRequest]:
    return st.builds(
        lambda after, before, types: pb.ListFailureGroupsRequest(
            failed_after=after, failed_before=before, job_types=types
        ),
        after=timestamps(),
        before=timestamps(),
        types=many(enums(JOB_TYPES)),
    )


def list_requests(pool: Pool) -> st.SearchStrategy[pb.ListJobsRequest]:
    return st.builds(
        lambda statuses, types, after, before, rest: pb.ListJobsRequest(
            statuses=statuses,
            job_types=types,
            created_after=after,
            created_before=before,
            **rest,
        ),
        statuses=many(enums(STATUSES)),
        types=many(enums(JOB_TYPES)),
        after=timestamps(),
        before=timestamps(),
        rest=st.fixed_dictionaries(
            {
                "target_id": st.one_of(st.sampled_from(pool.targets), hostile_text()),
                "error_message_contains": hostile_text(),
                "page_size": int32s(),
                "page_token": page_tokens(pool),
            }
        ),
    )


def _b64(value: Any) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def page_tokens(pool: Pool) -> st.SearchStrategy[str]:
    """Real tokens, and tokens shaped like them with hostile contents."""
    job_id = pool.job_ids[0]
    crafted = (
        ["0001-01-01T00:00:00+14:00", job_id],
        ["9999-12-31T23:59:59-14:00", job_id],
        ["2026-11-29T00:00:00+00:00", "not-a-uuid"],
        ["2026-11-29T00:00:00+00:00", "\x00"],
        ["not a date", job_id],
        [["nested", ["list"]], {"a": 1}],
        [1, 2],
        [],
        {"created": "2026-11-29"},
        None,
    )
    return st.one_of(
        st.just(""),
        st.sampled_from(pool.page_tokens),
        st.sampled_from([_b64(c) for c in crafted]),
        st.just(_b64(b"[" * 100_000)),
        st.binary(max_size=40).map(_b64),
        hostile_text(),
    )


def benign_retry_requests(pool: Pool) -> st.SearchStrategy[pb.RetryFailedRequest]:
    """Well-formed RetryFailed requests (so the filters and the move itself run too,
    on the seeded FAILED jobs), mostly dry runs so the pool keeps FAILED jobs."""
    return st.builds(
        pb.RetryFailedRequest,
        job_ids=st.lists(st.sampled_from(pool.job_ids), max_size=3),
        job_types=st.lists(st.sampled_from(JOB_TYPES), max_size=2),
        target_ids=st.lists(st.sampled_from(pool.targets), max_size=2),
        error_message_contains=st.sampled_from(["", "seeded", "제한", "%_", "no such text"]),
        all_failed=st.just(True),
        limit=st.sampled_from([0, 1, 2, 10_000]),
        dry_run=st.sampled_from([True, True, True, False]),
        requested_by=st.sampled_from(["", "operator"]),
    )


def retry_requests(pool: Pool) -> st.SearchStrategy[pb.RetryFailedRequest]:
    return st.one_of(benign_retry_requests(pool), hostile_retry_requests(pool))


def hostile_retry_requests(pool: Pool) -> st.SearchStrategy[pb.RetryFailedRequest]:
    return st.builds(
        lambda job_ids, types, target_ids, after, before, rest: pb.RetryFailedRequest(
            job_ids=job_ids,
            job_types=types,
            target_ids=target_ids,
            failed_after=after,
            failed_before=before,
            **rest,
        ),
        job_ids=many(ids(pool.job_ids), ids(pool.job_ids, short=True)),
        types=many(enums(JOB_TYPES)),
        target_ids=many(
            st.one_of(st.sampled_from(pool.targets), hostile_text()),
            st.one_of(st.sampled_from(pool.targets), short_text()),
        ),
        after=timestamps(),
        before=timestamps(),
        rest=st.fixed_dictionaries(
            {
                "error_message_contains": hostile_text(),
                "all_failed": st.booleans(),
                "limit": int32s(),
                "dry_run": st.booleans(),
                "requested_by": hostile_text(),
            }
        ),
    )


def stream_requests(pool: Pool) -> st.SearchStrategy[pb.StreamJobUpdatesRequest]:
    return st.builds(
        pb.StreamJobUpdatesRequest,
        job_ids=st.one_of(st.just([]), many(ids(pool.job_ids), ids(pool.job_ids, short=True))),
        job_types=many(enums(JOB_TYPES)),
        statuses=many(enums(STATUSES)),
    )


# Cursors of the right shape or nearly (a feed id and a position), beside hostile text.
CURSOR_LIKE = (
    "0.0",
    "ffffffffffffffff.0",
    "0123456789abcdef.99999999999",
    "0123456789abcdef.-1",
    "abc.1",
    ".1",
    "1.",
    "f" * 33 + ".1",
    "0." + "9" * 30,
)


def change_requests() -> st.SearchStrategy[pb.StreamJobChangesRequest]:
    return st.builds(
        pb.StreamJobChangesRequest,
        after_cursor=st.one_of(st.sampled_from(CURSOR_LIKE), hostile_text()),
        job_types=many(enums(JOB_TYPES)),
        statuses=many(enums(STATUSES)),
    )


def raw_requests() -> st.SearchStrategy[bytes]:
    """Bytes that are not a request at all, or a request with unknown fields."""
    unknown_fields = bytes([0x78, 0x01]) + bytes([0x9A, 0x06, 0x03]) + b"abc"  # fields 15, 99
    return st.one_of(st.just(b""), st.just(unknown_fields), st.binary(min_size=1, max_size=64))


# -- calling ----------------------------------------------------------------------


@dataclass
class Pool:
    """What exists on the server before the run: requests then name real things."""

    job_ids: list[str]
    targets: list[str]
    page_tokens: list[str]
    # COMPLETED jobs with big results (also in job_ids): depends_on may merge them all.
    big: list[str] = field(default_factory=list)


@dataclass
class Findings:
    examples: Counter[str] = field(default_factory=Counter)
    seconds: dict[str, float] = field(default_factory=dict)
    codes: Counter[tuple[str, str]] = field(default_factory=Counter)
    # (rpc, code, message head) -> one request that got it
    bad: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def record(
        self, rpc: str, code: grpc.StatusCode, message: str, request: Any, *, item: bool = False
    ) -> None:
        """One answer; with `item`, one item's error inside an OK answer (a
        BatchEnqueue result): checked alike, not counted as an example."""
        if not item:
            self.examples[rpc] += 1
        self.codes[(rpc + (" item" if item else ""), code.name)] += 1
        # A word the request itself holds is the caller's own text echoed back (an
        # id named in the refusal), not a leak: Hypothesis also draws the string
        # constants of the code under test, such as "postgresql+asyncpg".
        leak = next((word for word in LEAKS if word in message), None)
        if leak is not None and leak in (
            repr(request) if isinstance(request, bytes) else str(request)
        ):
            leak = None
        if code in ALLOWED and leak is None and len(message) <= MAX_MESSAGE_CHARS:
            return
        why = f"leaks {leak!r}: " if leak else ""
        if len(message) > MAX_MESSAGE_CHARS:
            why = f"message of {len(message)} chars: "
        # One example per kind of answer: numbers in the message do not make a new kind.
        key = (rpc, code.name, why + re.sub(r"-?\d+", "N", message)[:90])
        self.bad.setdefault(key, _describe(request))


def _describe(request: Any) -> str:
    """A request in a line: each set field, long values and lists cut short."""
    if isinstance(request, bytes):
        return f"raw bytes {request[:40]!r}"
    parts = []
    for descriptor, value in request.ListFields():
        if descriptor.is_repeated:
            head = [_short(v) for v in value[:2]]
            parts.append(f"{descriptor.name}=[{len(value)} items: {', '.join(head)}]")
        else:
            parts.append(f"{descriptor.name}={_short(value)}")
    return f"{type(request).__name__}({', '.join(parts)})"


def _short(value: Any) -> str:
    if isinstance(value, Message):
        return _describe(value)
    text = repr(value)
    return text if len(text) <= 50 else f"{text[:40]}...({len(text)} chars)"


class Client:
    """Sync calls over one channel; every request goes out as raw bytes (_wire)."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(
            address, options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)]
        )

    def unary(self, rpc: str, response_type: type[Message], request: Any) -> tuple[Any, str]:
        """(code, message) of one unary call."""
        code, message, _ = self.answer(rpc, response_type, request)
        return code, message

    def answer(self, rpc: str, response_type: type[Message], request: Any) -> tuple[Any, str, Any]:
        """(code, message, response or None) of one unary call."""
        call = self.channel.unary_unary(
            f"/san.jobs.v1.JobService/{rpc}",
            request_serializer=_wire,
            response_deserializer=response_type.FromString,
        )
        try:
            response = call(request, timeout=CALL_TIMEOUT)
        except grpc.RpcError as error:
            return error.code(), error.details() or "", None  # type: ignore[attr-defined]
        return grpc.StatusCode.OK, "", response

    def stream(
        self, request: Any, expected: int | None, rpc: str = "StreamJobUpdates"
    ) -> tuple[Any, str]:
        """(code, message) of a streaming call: OK once `expected` messages came (or,
        for a live feed or the change feed, when nothing failed within
        FEED_PEEK_SECONDS)."""
        call = self.channel.unary_stream(
            f"/san.jobs.v1.JobService/{rpc}",
            request_serializer=_wire,
            response_deserializer=STREAM_RESPONSES[rpc].FromString,
        )(request, timeout=CALL_TIMEOUT)
        peeked = threading.Event()

        def peek_done() -> None:
            peeked.set()
            call.cancel()

        timer = threading.Timer(FEED_PEEK_SECONDS if expected is None else 10.0, peek_done)
        timer.start()
        received = 0
        try:
            for _ in call:
                received += 1
                if expected is not None and received >= expected:
                    call.cancel()
                    break
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.CANCELLED and peeked.is_set():  # type: ignore[attr-defined]
                return grpc.StatusCode.OK, ""
            return error.code(), error.details() or ""  # type: ignore[attr-defined]
        finally:
            timer.cancel()
        return grpc.StatusCode.OK, ""

    def close(self) -> None:
        self.channel.close()


def _expected_messages(request: pb.StreamJobUpdatesRequest) -> int | None:
    """Messages a healthy stream sends first: one per distinct named job."""
    if not request.job_ids:
        return None
    distinct: set[uuid.UUID] = set()
    for value in request.job_ids:
        try:
            distinct.add(uuid.UUID(value))
        except ValueError:
            return 1  # refused as a whole; if it were not, its first message counts
    return len(distinct)


def _expected_for_raw(data: bytes) -> int | None:
    """As _expected_messages, for raw bytes: those that parse (unknown fields are
    skipped) are a request like any other, often a live feed; the rest are refused,
    and a refused stream ends before its first message."""
    try:
        request = pb.StreamJobUpdatesRequest.FromString(data)
    except DecodeError:
        return 1
    return _expected_messages(request)


def _settings(rpc: str) -> settings:
    return settings(
        max_examples=EXAMPLES[rpc],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def run_every_rpc(address: str, pool: Pool) -> Findings:
    """Hypothesis over each RPC in turn, from this (non-loop) thread."""
    client = Client(address)
    found = Findings()

    def unary(rpc: str, response: type[Message]) -> Callable[[Any], None]:
        def check(request: Any) -> None:
            code, message = client.unary(rpc, response, request)
            found.record(rpc, code, message, request)

        return check

    enqueue = unary("Enqueue", pb.EnqueueResponse)

    def batch_enqueue(request: pb.BatchEnqueueRequest | bytes) -> None:
        code, message, response = client.answer("BatchEnqueue", pb.BatchEnqueueResponse, request)
        found.record("BatchEnqueue", code, message, request)
        if response is None:
            return
        if isinstance(request, pb.BatchEnqueueRequest):
            assert len(response.results) == len(request.requests)
        for result in response.results:
            if result.WhichOneof("outcome") == "error":
                item_code = next(c for c in grpc.StatusCode if c.value[0] == result.error.code)
                found.record("BatchEnqueue", item_code, result.error.message, request, item=True)

    get_job = unary("GetJob", pb.GetJobResponse)
    list_jobs = unary("ListJobs", pb.ListJobsResponse)
    cancel = unary("CancelJob", pb.CancelJobResponse)
    retry = unary("RetryFailed", pb.RetryFailedResponse)
    stats = unary("GetJobStats", pb.GetJobStatsResponse)
    usage = unary("GetUsage", pb.GetUsageResponse)
    failure_groups = unary("ListFailureGroups", pb.ListFailureGroupsResponse)
    prune = unary("PruneJobs", pb.PruneJobsResponse)
    create_schedule = unary("CreateSchedule", pb.CreateScheduleResponse)
    get_schedule = unary("GetSchedule", pb.GetScheduleResponse)
    list_schedules = unary("ListSchedules", pb.ListSchedulesResponse)
    delete_schedule = unary("DeleteSchedule", pb.DeleteScheduleResponse)
    pause_schedule = unary("PauseSchedule", pb.PauseScheduleResponse)
    resume_schedule = unary("ResumeSchedule", pb.ResumeScheduleResponse)

    def stream(request: pb.StreamJobUpdatesRequest | bytes) -> None:
        if isinstance(request, bytes):
            expected = _expected_for_raw(request)
        else:
            expected = _expected_messages(request)
        code, message = client.stream(request, expected)
        found.record("StreamJobUpdates", code, message, request)

    def changes(request: pb.StreamJobChangesRequest | bytes) -> None:
        # The change feed never ends: a request it takes is serving after the peek.
        code, message = client.stream(request, None, "StreamJobChanges")
        found.record("StreamJobChanges", code, message, request)

    raw = raw_requests()
    runs: list[tuple[str, Callable[[Any], None], st.SearchStrategy[Any]]] = [
        ("Enqueue", enqueue, st.one_of(enqueue_requests(pool), raw)),
        ("BatchEnqueue", batch_enqueue, st.one_of(batch_enqueue_requests(pool), raw)),
        ("GetJob", get_job, st.one_of(st.builds(pb.GetJobRequest, job_id=ids(pool.job_ids)), raw)),
        ("ListJobs", list_jobs, st.one_of(list_requests(pool), raw)),
        (
            "CancelJob",
            cancel,
            st.one_of(
                st.builds(pb.CancelJobRequest, job_id=ids(pool.job_ids), reason=hostile_text()),
                raw,
            ),
        ),
        ("RetryFailed", retry, st.one_of(retry_requests(pool), raw)),
        ("GetJobStats", stats, st.one_of(st.just(pb.GetJobStatsRequest()), raw)),
        ("StreamJobUpdates", stream, st.one_of(stream_requests(pool), raw)),
        ("StreamJobChanges", changes, st.one_of(change_requests(), raw)),
        ("GetUsage", usage, st.one_of(usage_requests(), raw)),
        ("ListFailureGroups", failure_groups, st.one_of(failure_group_requests(), raw)),
        ("PruneJobs", prune, st.one_of(st.builds(pb.PruneJobsRequest, dry_run=st.booleans()), raw)),
        ("CreateSchedule", create_schedule, st.one_of(schedule_requests(pool), raw)),
        (
            "GetSchedule",
            get_schedule,
            st.one_of(st.builds(pb.GetScheduleRequest, schedule_id=schedule_ids()), raw),
        ),
        (
            "ListSchedules",
            list_schedules,
            st.one_of(
                st.builds(
                    pb.ListSchedulesRequest,
                    page_size=st.integers(-(2**31), 2**31 - 1),
                    page_token=hostile_text(),
                ),
                raw,
            ),
        ),
        (
            "DeleteSchedule",
            delete_schedule,
            st.one_of(st.builds(pb.DeleteScheduleRequest, schedule_id=schedule_ids()), raw),
        ),
        (
            "PauseSchedule",
            pause_schedule,
            st.one_of(st.builds(pb.PauseScheduleRequest, schedule_id=schedule_ids()), raw),
        ),
        (
            "ResumeSchedule",
            resume_schedule,
            st.one_of(st.builds(pb.ResumeScheduleRequest, schedule_id=schedule_ids()), raw),
        ),
    ]
    try:
        for rpc, check, strategy in runs:
            started = time.monotonic()
            test = given(strategy)(_settings(rpc)(check))
            for request in _explicit_examples(pool).get(rpc, []):
                test = example(request)(test)
            test()
            found.seconds[rpc] = round(time.monotonic() - started, 1)
    finally:
        client.close()
    return found


def _explicit_examples(pool: Pool) -> dict[str, list[Any]]:
    """Requests always tried, besides the generated ones: the cases issue 9 reported."""
    nul = "a\x00b"
    return {
        "Enqueue": [
            card_request(nul, "text"),
            card_request("t-nul-text", nul),
            card_request("t-nul-by", "text", requested_by=nul),
            card_request("t-nul-rid", "text", request_id=nul),
            pb.EnqueueRequest(
                job_type=pb.JOB_TYPE_TIL_GENERATION,
                target_id="t-nul-note",
                til_generation_input=pb.TilGenerationInput(day="2026-11-29", notes=[nul]),
            ),
        ],
        "CancelJob": [pb.CancelJobRequest(job_id=pool.job_ids[-1], reason=nul)],
        "ListJobs": [
            pb.ListJobsRequest(target_id=nul),
            pb.ListJobsRequest(error_message_contains=nul),
            pb.ListJobsRequest(page_token=nul),
        ],
        "RetryFailed": [
            pb.RetryFailedRequest(target_ids=[nul]),
            pb.RetryFailedRequest(job_ids=[pool.job_ids[0]] * 40_000),
            pb.RetryFailedRequest(job_ids=[str(uuid.UUID(int=i)) for i in range(40_000)]),
        ],
        "GetJob": [pb.GetJobRequest(job_id="x" * 13_000_000)],
    }


# Each seeded big dependency's result text, in characters: a few of them merged into one
# input pass an Enqueue's own bound (DEFAULT_MAX_TEXT_CHARS) several times over.
BIG_RESULT_CHARS = 60_000


async def _big_dependencies(stub: Any, prefix: str) -> list[str]:
    """Three CARD_ANALYSIS and three TIL_GENERATION jobs run to COMPLETED, each with a
    result of about BIG_RESULT_CHARS (the scripted gateway's summary is the text's
    first sentence, a TIL's body its notes): what a TIL or a recall depending on them
    takes adds up to about 3 (a TIL) or 6 (a recall) times that (issue 42, point 3)."""
    words = "word " * (BIG_RESULT_CHARS // 5)  # one sentence: no full stop
    cards = [
        (await stub.Enqueue(card_request(f"{prefix}-card-{i}", words))).job.id for i in range(3)
    ]
    tils = [
        (
            await stub.Enqueue(
                pb.EnqueueRequest(
                    job_type=pb.JOB_TYPE_TIL_GENERATION,
                    target_id=f"{prefix}-til-{i}",
                    til_generation_input=pb.TilGenerationInput(day="2026-12-07", notes=[words]),
                )
            )
        ).job.id
        for i in range(3)
    ]
    ended = await wait_terminal(stub, cards + tils, timeout=60)
    assert {job.status for job in ended.values()} == {pb.JOB_STATUS_COMPLETED}, ended
    return cards + tils


def _merged_chars(job: pb.Job) -> tuple[int, int]:
    """(characters, items) of the notes of a TIL's input or the sources of a recall's."""
    if job.HasField("til_generation_input"):
        notes = job.til_generation_input.notes
        return sum(len(n) for n in notes), len(notes)
    if job.HasField("recall_generation_input"):
        sources = job.recall_generation_input.sources
        return sum(len(s.text) for s in sources), len(sources)
    return 0, 0


def _within_an_enqueues_bounds(job: pb.Job) -> str | None:
    """Why `job`'s stored input is bigger than an Enqueue may send, or None."""
    chars, items = _merged_chars(job)
    most = MAX_TIL_NOTES if job.HasField("til_generation_input") else MAX_RECALL_SOURCES
    if chars > DEFAULT_MAX_TEXT_CHARS or items > most:
        return f"job {job.id}: {chars} characters in {items} items"
    return None


async def _merges_stay_within_bounds(service: Service, big: list[str]) -> None:
    """After the run: every job whose input took its dependencies' results (those the
    run drew on the seeded big dependencies, and two made here on fresh ones, run to
    their end) holds no more than an Enqueue may send, and every page of ListJobs,
    all of them read with the default page size, answers (issue 42, point 3: forty
    merged TILs made a 4.75 MB input that broke GetJob and every page holding it)."""
    stub = service.stub
    fresh = await _big_dependencies(stub, "after")
    cards = fresh[:3]
    til = pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_TIL_GENERATION,
        target_id="merged-til",
        til_generation_input=pb.TilGenerationInput(day="2026-12-07", notes=["Own note."]),
        depends_on=cards,
    )
    recall = pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_RECALL_GENERATION,
        target_id="merged-recall",
        recall_generation_input=pb.RecallGenerationInput(
            sources=[pb.RecallSource(title="Own", text="Own text.")]
        ),
        depends_on=fresh,
    )
    merged = [(await stub.Enqueue(til)).job.id, (await stub.Enqueue(recall)).job.id]
    ended = await wait_terminal(stub, merged, timeout=60)
    for job_id in merged:
        job = (await stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)).job
        assert job.status == pb.JOB_STATUS_COMPLETED, ended[job_id]
        chars, items = _merged_chars(job)
        # It took something of each dependency it could: the bound is met, not dodged.
        assert chars > DEFAULT_MAX_TEXT_CHARS - BIG_RESULT_CHARS and items > 1, (chars, items)
    took_results = (pb.JOB_TYPE_TIL_GENERATION, pb.JOB_TYPE_RECALL_GENERATION)
    drawn, token, oversized = 0, "", []
    while True:
        page = await stub.ListJobs(pb.ListJobsRequest(page_token=token), timeout=30)
        for job in page.jobs:
            if job.job_type in took_results and set(job.depends_on) & set(big + fresh):
                drawn += job.status != pb.JOB_STATUS_PENDING
                full = (await stub.GetJob(pb.GetJobRequest(job_id=job.id), timeout=10)).job
                problem = _within_an_enqueues_bounds(full)
                if problem is not None:
                    oversized.append(problem)
        token = page.next_page_token
        if not token:
            break
    assert not oversized, f"merged inputs past an Enqueue's bounds: {oversized}"
    print(f"jobs that merged the big dependencies' results: {drawn} (2 made after the run)")


async def _seed(service: Service) -> Pool:
    """FAILED jobs (for RetryFailed), then active ones that stay active (the gateway
    hangs), so Enqueue can meet duplicates and CancelJob both outcomes; and COMPLETED
    jobs with big results, so a drawn depends_on may merge more than an Enqueue may
    send."""
    stub = service.stub
    big = await _big_dependencies(stub, "big")
    service.gateway.script = lambda _job, _attempt: Fail(
        grpc.StatusCode.INVALID_ARGUMENT, "seeded failure 제한 %_"
    )
    failed = [
        (await stub.Enqueue(card_request(f"failed-{i}", "Seeded text."))).job.id for i in range(3)
    ]
    await wait_terminal(stub, failed, timeout=20)
    # The seeded active jobs (and the chain below the first) hang; a job the run makes
    # is answered, so those that merge the big dependencies' results run to their end.
    service.gateway.script = lambda _job, _attempt: Hang()
    active = [
        (await stub.Enqueue(card_request(f"active-{i}", "Seeded text."))).job.id for i in range(3)
    ]
    hanging = set(active)
    service.gateway.script = lambda job_id, _attempt: Hang() if job_id in hanging else None
    # The end of a chain as deep as MAX_DEPENDENCY_DEPTH allows (issue 42, point 1):
    # depends_on drawn from the pool may name it, and must be refused, naming it.
    deepest = active[0]
    for depth in range(MAX_DEPENDENCY_DEPTH):
        link = card_request(f"chain-{depth}", "Seeded text.", depends_on=[deepest])
        deepest = (await stub.Enqueue(link)).job.id
    page = await stub.ListJobs(pb.ListJobsRequest(page_size=1))
    return Pool(
        job_ids=failed + active + [deepest] + big,
        targets=[f"failed-{i}" for i in range(3)] + [f"active-{i}" for i in range(3)],
        page_tokens=[page.next_page_token],
        big=big,
    )


async def _still_serving(service: Service, job_id: str) -> None:
    async with grpc.aio.insecure_channel(service.runtime.address) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    got = await service.stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)
    assert got.job.id == job_id
    fresh = await service.stub.Enqueue(card_request(f"after-{uuid.uuid4()}", "Still here."))
    assert fresh.job.status == pb.JOB_STATUS_PENDING


@pytest.mark.timeout(300)
async def test_every_rpc_answers_hostile_requests_with_a_callers_code(
    service: Service, database_url: str
) -> None:
    pool = await _seed(service)
    found = await asyncio.to_thread(run_every_rpc, service.runtime.address, pool)
    database = database_url.split(":", 1)[0]
    summary = "\n".join(
        f"  {rpc} {code}: {count}" for (rpc, code), count in sorted(found.codes.items())
    )
    print(
        f"\n[{database}] examples per RPC: {dict(found.examples)}"
        f"\nseconds per RPC: {found.seconds}\ncodes:\n{summary}"
    )
    assert set(found.examples) == set(EXAMPLES)
    # Every RPC of the contract is in the run: a new one cannot be left out.
    assert set(EXAMPLES) == set(pb.DESCRIPTOR.services_by_name["JobService"].methods_by_name)
    await _still_serving(service, pool.job_ids[0])
    wrong = "\n".join(
        f"  {rpc} -> {code} {what!r}\n      e.g. {example}"
        for (rpc, code, what), example in sorted(found.bad.items())
    )
    assert not found.bad, f"[{database}] answers a caller must never get:\n{wrong}"
    await _merges_stay_within_bounds(service, pool.big)


# -- a second, authenticated tenant (issue 22) ----------------------------------------

# Examples per RPC a submitter may call, as bob against alice's jobs and keys. Fewer
# than above: this run is about whose job an answer names, not about each field.
TENANT_EXAMPLES = {
    "Enqueue": 120,
    "BatchEnqueue": 30,
    "GetJob": 20,
    "ListJobs": 20,
    "CancelJob": 20,
    "StreamJobUpdates": 20,
    "StreamJobChanges": 20,
    "GetUsage": 10,
}
# A submitter's live feed (StreamJobUpdates without ids) is refused for its role.
TENANT_ALLOWED = ALLOWED | {grpc.StatusCode.PERMISSION_DENIED}
_UUID_TEXT = re.compile(
    r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
)


def _uuids_in(data: bytes) -> set[str]:
    """The job ids a request or an answer names, in any spelling, canonical."""
    return {str(uuid.UUID(m)) for m in _UUID_TEXT.findall(data.decode(errors="replace"))}


@dataclass
class TenantFindings:
    examples: Counter[str] = field(default_factory=Counter)
    # (rpc, what) -> one request that got it
    bad: dict[tuple[str, str], str] = field(default_factory=dict)

    def record(self, rpc: str, request: Any, code: grpc.StatusCode, answer: bytes) -> None:
        self.examples[rpc] += 1
        if code not in TENANT_ALLOWED:
            self.bad.setdefault((rpc, f"code {code.name}"), _describe(request))


class TenantClient(Client):
    """Client's calls, each with `metadata` (bob's token), answering the answer's bytes:
    the response, or the error's message and every trailing metadata value (the
    google.rpc.Status details with ErrorInfo among them)."""

    def __init__(self, address: str, metadata: tuple[tuple[str, str], ...]) -> None:
        super().__init__(address)
        self.metadata = metadata

    def call(self, rpc: str, response_type: type[Message], request: Any) -> tuple[Any, bytes]:
        call = self.channel.unary_unary(
            f"/san.jobs.v1.JobService/{rpc}",
            request_serializer=_wire,
            response_deserializer=response_type.FromString,
        )
        try:
            response = call(request, timeout=CALL_TIMEOUT, metadata=self.metadata)
        except grpc.RpcError as error:
            return error.code(), _error_bytes(error)  # type: ignore[attr-defined]
        return grpc.StatusCode.OK, response.SerializeToString()

    def stream_bytes(
        self, request: Any, expected: int | None, rpc: str = "StreamJobUpdates"
    ) -> tuple[Any, bytes]:
        """(code, every message's bytes) of a streaming call, read as `stream`."""
        call = self.channel.unary_stream(
            f"/san.jobs.v1.JobService/{rpc}",
            request_serializer=_wire,
            response_deserializer=STREAM_RESPONSES[rpc].FromString,
        )(request, timeout=CALL_TIMEOUT, metadata=self.metadata)
        timer = threading.Timer(FEED_PEEK_SECONDS if expected is None else 10.0, call.cancel)
        timer.start()
        seen: list[bytes] = []
        try:
            for message in call:
                seen.append(message.SerializeToString())
                if expected is not None and len(seen) >= expected:
                    call.cancel()
                    break
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.CANCELLED:  # type: ignore[attr-defined]
                return grpc.StatusCode.OK, b"".join(seen)
            return error.code(), b"".join(seen) + _error_bytes(error)  # type: ignore[attr-defined]
        finally:
            timer.cancel()
        return grpc.StatusCode.OK, b"".join(seen)


def _error_bytes(error: Any) -> bytes:
    parts = [(error.details() or "").encode()]
    for _key, value in error.trailing_metadata() or ():
        parts.append(value if isinstance(value, bytes) else str(value).encode())
    return b"".join(parts)


def run_as_second_tenant(
    address: str, metadata: tuple[tuple[str, str], ...], pool: Pool, others: set[str]
) -> TenantFindings:
    """Hypothesis over each RPC a submitter may call, as the second tenant: no answer
    may name one of `others` (the first tenant's job ids) that the request did not."""
    client = TenantClient(address, metadata)
    found = TenantFindings()

    def check(rpc: str, request: Any, code: grpc.StatusCode, answer: bytes) -> None:
        found.record(rpc, request, code, answer)
        named = (_uuids_in(answer) & others) - _uuids_in(_wire(request))
        if named:
            found.bad.setdefault((rpc, "names another tenant's job"), _describe(request))

    def unary(rpc: str, response: type[Message]) -> Callable[[Any], None]:
        def run(request: Any) -> None:
            code, answer = client.call(rpc, response, request)
            check(rpc, request, code, answer)

        return run

    def stream(request: pb.StreamJobUpdatesRequest | bytes) -> None:
        if isinstance(request, bytes):
            expected = _expected_for_raw(request)
        else:
            expected = _expected_messages(request)
        code, answer = client.stream_bytes(request, expected)
        check("StreamJobUpdates", request, code, answer)

    def changes(request: pb.StreamJobChangesRequest) -> None:
        # From any cursor: the first tenant's changes (its FAILED jobs) are in the feed.
        code, answer = client.stream_bytes(request, None, "StreamJobChanges")
        check("StreamJobChanges", request, code, answer)

    # The keys the first tenant holds, always tried: its request ids and active
    # targets, with either duplicate rule, alone and in a batch.
    keys = [
        card_request(target, "text", request_id=rid, on_duplicate=rule)
        for target in ("active-0", "t-fresh")
        for rid in ("", "rid-1", "rid-2")
        for rule in (pb.ON_DUPLICATE_REJECT, pb.ON_DUPLICATE_RETURN_EXISTING)
    ]
    raw = raw_requests()
    runs: list[tuple[str, Callable[[Any], None], st.SearchStrategy[Any], list[Any]]] = [
        (
            "Enqueue",
            unary("Enqueue", pb.EnqueueResponse),
            st.one_of(enqueue_requests(pool), raw),
            keys,
        ),
        (
            "BatchEnqueue",
            unary("BatchEnqueue", pb.BatchEnqueueResponse),
            st.one_of(batch_enqueue_requests(pool), raw),
            [pb.BatchEnqueueRequest(requests=keys)],
        ),
        (
            "GetJob",
            unary("GetJob", pb.GetJobResponse),
            st.builds(pb.GetJobRequest, job_id=ids(pool.job_ids)),
            [],
        ),
        ("ListJobs", unary("ListJobs", pb.ListJobsResponse), list_requests(pool), []),
        (
            "CancelJob",
            unary("CancelJob", pb.CancelJobResponse),
            st.builds(pb.CancelJobRequest, job_id=ids(pool.job_ids), reason=short_text()),
            [],
        ),
        ("StreamJobUpdates", stream, stream_requests(pool), []),
        ("StreamJobChanges", changes, change_requests(), [pb.StreamJobChangesRequest()]),
        ("GetUsage", unary("GetUsage", pb.GetUsageResponse), usage_requests(), []),
    ]
    try:
        for rpc, run, strategy, always in runs:
            test = given(strategy)(
                settings(
                    max_examples=TENANT_EXAMPLES[rpc],
                    deadline=None,
                    derandomize=True,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                )(run)
            )
            for request in always:
                test = example(request)(test)
            test()
    finally:
        client.close()
    return found


async def _seed_first_tenant(service: Service, metadata: tuple[tuple[str, str], ...]) -> Pool:
    """The first tenant's jobs: FAILED ones, then active ones (the gateway hangs) that
    hold the request ids and targets the strategies draw from."""
    stub = service.stub
    service.gateway.script = lambda _job, _attempt: Fail(
        grpc.StatusCode.INVALID_ARGUMENT, "seeded failure"
    )
    failed = [
        (
            await stub.Enqueue(
                card_request(f"failed-{i}", "Seeded text.", request_id=f"rid-f{i}"),
                metadata=metadata,
            )
        ).job.id
        for i in range(3)
    ]
    for job_id in failed:
        for _ in range(400):
            got = await stub.GetJob(pb.GetJobRequest(job_id=job_id), metadata=metadata)
            if got.job.status == pb.JOB_STATUS_FAILED:
                break
            await asyncio.sleep(0.05)
    service.gateway.script = lambda _job, _attempt: Hang()
    active = [
        (
            await stub.Enqueue(
                card_request(f"active-{i}", "Seeded text.", request_id=f"rid-{i + 1}"),
                metadata=metadata,
            )
        ).job.id
        for i in range(3)
    ]
    page = await stub.ListJobs(pb.ListJobsRequest(page_size=1), metadata=metadata)
    return Pool(
        job_ids=failed + active,
        targets=[f"failed-{i}" for i in range(3)] + [f"active-{i}" for i in range(3)],
        page_tokens=[page.next_page_token],
    )


@pytest.mark.timeout(300)
async def test_no_answer_to_a_second_tenant_names_the_first_tenants_jobs(
    start_service: StartService, database_url: str
) -> None:
    service = await start_service(auth="token", workers=2)
    alice = bearer(await add_token(service, "alice", Role.SUBMITTER))
    bob = bearer(await add_token(service, "bob", Role.SUBMITTER))
    pool = await _seed_first_tenant(service, alice)
    found = await asyncio.to_thread(
        run_as_second_tenant, service.runtime.address, bob, pool, set(pool.job_ids)
    )
    assert set(found.examples) == set(TENANT_EXAMPLES)
    database = database_url.split(":", 1)[0]
    wrong = "\n".join(
        f"  {rpc} -> {what}\n      e.g. {example}"
        for (rpc, what), example in sorted(found.bad.items())
    )
    assert not found.bad, f"[{database}] answers the second tenant must never get:\n{wrong}"
