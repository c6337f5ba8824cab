"""Hostile and careless requests over real gRPC, on SQLite and PostgreSQL (issue 9,
points 1, 4 and 5): every bad field is INVALID_ARGUMENT naming it, never UNKNOWN or
UNAVAILABLE and never SQL text; a too-big message is RESOURCE_EXHAUSTED; Enqueue
echoes no input; ListJobs pages fit the send limit whatever the jobs hold."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.client import AsyncJobsClient, CardAnalysisInput, InvalidRequestError
from san_jobs.job_service.domain import limits
from san_jobs.job_service.transport import requests as request_rules
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service
from tests.support.jobs_api import card_request, list_all
from tests.support.rich_errors import rich_error

SOME_ID = "3f1c3a9e-8a52-4d0e-9a55-2d2f0b6f7c11"
MiB = 1024 * 1024


def token_of(value: object) -> str:
    """A page token holding `value` as its JSON, as a forger would make it."""
    raw = json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def card(target_id: str = "scrap-1", **fields: Any) -> pb.EnqueueRequest:
    text = fields.pop("text", "Some text.")
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id=target_id,
        card_analysis_input=pb.CardAnalysisInput(
            text=text, url=fields.pop("url", ""), title=fields.pop("title", "")
        ),
        **fields,
    )


def til(notes: list[str], day: str = "2026-11-29") -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_TIL_GENERATION,
        target_id=day,
        til_generation_input=pb.TilGenerationInput(day=day, notes=notes),
    )


def recall(sources: list[pb.RecallSource]) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_RECALL_GENERATION,
        target_id="deck-1",
        recall_generation_input=pb.RecallGenerationInput(sources=sources),
    )


def ts(seconds: int, nanos: int = 0) -> Timestamp:
    return Timestamp(seconds=seconds, nanos=nanos)


# (case, RPC name, request, the field the BadRequest must name)
BAD_FIELDS: list[tuple[str, str, Any, str]] = [
    # NUL in every string field (point 4).
    ("NUL target_id", "Enqueue", card("a\x00b"), "target_id"),
    ("NUL requested_by", "Enqueue", card(requested_by="u\x00"), "requested_by"),
    ("NUL request_id", "Enqueue", card(request_id="\x00"), "request_id"),
    ("NUL text", "Enqueue", card(text="page \x00 text"), "card_analysis_input.text"),
    ("NUL url", "Enqueue", card(url="https://x/\x00"), "card_analysis_input.url"),
    ("NUL title", "Enqueue", card(title="T\x00"), "card_analysis_input.title"),
    ("NUL day", "Enqueue", til(["n"], day="2026-11-2\x00"), "til_generation_input.day"),
    ("NUL note", "Enqueue", til(["ok", "b\x00d"]), "til_generation_input.notes[1]"),
    (
        "NUL source title",
        "Enqueue",
        recall([pb.RecallSource(title="\x00", text="t")]),
        "recall_generation_input.sources[0].title",
    ),
    (
        "NUL source text",
        "Enqueue",
        recall([pb.RecallSource(text="t"), pb.RecallSource(text="\x00")]),
        "recall_generation_input.sources[1].text",
    ),
    ("NUL job_id", "GetJob", pb.GetJobRequest(job_id="\x00"), "job_id"),
    (
        "NUL cancel reason",
        "CancelJob",
        pb.CancelJobRequest(job_id=SOME_ID, reason="\x00"),
        "reason",
    ),
    ("NUL list target_id", "ListJobs", pb.ListJobsRequest(target_id="\x00"), "target_id"),
    (
        "NUL list error_message_contains",
        "ListJobs",
        pb.ListJobsRequest(error_message_contains="Time\x00"),
        "error_message_contains",
    ),
    ("NUL page_token", "ListJobs", pb.ListJobsRequest(page_token="\x00"), "page_token"),
    (
        "NUL retry target_ids",
        "RetryFailed",
        pb.RetryFailedRequest(target_ids=["ok", "\x00"]),
        "target_ids[1]",
    ),
    (
        "NUL retry error_message_contains",
        "RetryFailed",
        pb.RetryFailedRequest(error_message_contains="\x00"),
        "error_message_contains",
    ),
    (
        "NUL retry requested_by",
        "RetryFailed",
        pb.RetryFailedRequest(all_failed=True, requested_by="\x00"),
        "requested_by",
    ),
    # Other control characters in identifier-like fields.
    ("newline requested_by", "Enqueue", card(requested_by="u1\nFORGED"), "requested_by"),
    ("escape target_id", "Enqueue", card("\x1b[2J"), "target_id"),
    ("tab request_id", "Enqueue", card(request_id="a\tb"), "request_id"),
    ("DEL page_token", "ListJobs", pb.ListJobsRequest(page_token="abc\x7f"), "page_token"),
    ("C1 list target_id", "ListJobs", pb.ListJobsRequest(target_id="a\x85"), "target_id"),
    # Lengths and counts (point 1).
    ("long target_id", "Enqueue", card("t" * 257), "target_id"),
    ("long url", "Enqueue", card(url="u" * 4097), "card_analysis_input.url"),
    ("long title", "Enqueue", card(title="t" * 1001), "card_analysis_input.title"),
    ("too many notes", "Enqueue", til(["n"] * 1001), "til_generation_input.notes"),
    (
        "too many sources",
        "Enqueue",
        recall([pb.RecallSource(text="t")] * 101),
        "recall_generation_input.sources",
    ),
    (
        "long cancel reason",
        "CancelJob",
        pb.CancelJobRequest(job_id=SOME_ID, reason="r" * 1001),
        "reason",
    ),
    ("huge job_id", "GetJob", pb.GetJobRequest(job_id="x" * 1_000_000), "job_id"),
    (
        "long list needle",
        "ListJobs",
        pb.ListJobsRequest(error_message_contains="e" * 1004),
        "error_message_contains",
    ),
    (
        "many statuses",
        "ListJobs",
        pb.ListJobsRequest(statuses=[pb.JOB_STATUS_FAILED] * 101),
        "statuses",
    ),
    (
        "40,000 job_ids",
        "RetryFailed",
        pb.RetryFailedRequest(job_ids=[str(uuid.uuid4()) for _ in range(40_000)]),
        "job_ids",
    ),
    (
        "10,001 target_ids",
        "RetryFailed",
        pb.RetryFailedRequest(target_ids=[f"t{i}" for i in range(10_001)]),
        "target_ids",
    ),
    (
        "1,001 stream job_ids",
        "StreamJobUpdates",
        pb.StreamJobUpdatesRequest(job_ids=[str(uuid.uuid4()) for _ in range(1001)]),
        "job_ids",
    ),
    # Timestamps outside years 1 to 9999, or with bad nanos (point 5).
    ("year 33658", "ListJobs", pb.ListJobsRequest(created_after=ts(10**12)), "created_after"),
    ("year -29719", "ListJobs", pb.ListJobsRequest(created_before=ts(-(10**12))), "created_before"),
    (
        "negative nanos",
        "RetryFailed",
        pb.RetryFailedRequest(failed_after=ts(0, -1)),
        "failed_after",
    ),
    (
        "nanos of 1e9",
        "RetryFailed",
        pb.RetryFailedRequest(failed_before=ts(0, 10**9)),
        "failed_before",
    ),
    # Malformed page tokens (point 5).
    ("garbage token", "ListJobs", pb.ListJobsRequest(page_token="not-a-token!"), "page_token"),
    (
        "nested JSON token",
        "ListJobs",
        pb.ListJobsRequest(page_token=token_of([[["2025-01-01T00:00:00+00:00"]], {"a": []}])),
        "page_token",
    ),
    (
        "deep JSON token",
        "ListJobs",
        pb.ListJobsRequest(page_token=base64.urlsafe_b64encode(b"[" * 380).decode()),
        "page_token",
    ),
    (
        "year 1 at +14:00 token",
        "ListJobs",
        pb.ListJobsRequest(page_token=token_of(["0001-01-01T00:00:00+14:00", SOME_ID])),
        "page_token",
    ),
    (
        "NUL id in token",
        "ListJobs",
        pb.ListJobsRequest(page_token=token_of(["2025-01-01T00:00:00+00:00", "\x00"])),
        "page_token",
    ),
    (
        "naive time token",
        "ListJobs",
        pb.ListJobsRequest(page_token=token_of(["2025-01-01T00:00:00", SOME_ID])),
        "page_token",
    ),
    ("huge token", "ListJobs", pb.ListJobsRequest(page_token="A" * 1_000_000), "page_token"),
]

# Requests at the edge of every bound: all OK.
GOOD_EDGES: list[tuple[str, str, Any]] = [
    ("free text keeps newlines and tabs", "Enqueue", card(title="T\n\tx", text="a\nb\tc")),
    ("256-character identifiers", "Enqueue", card("t" * 256, requested_by="u" * 256)),
    ("1,000 notes", "Enqueue", til(["n"] * 1000)),
    (
        "years 1 and 9999",
        "ListJobs",
        pb.ListJobsRequest(
            created_after=ts(-62_135_596_800),
            created_before=ts(253_402_300_799, 999_999_999),
        ),
    ),
    (
        "10,000 job_ids and target_ids",
        "RetryFailed",
        pb.RetryFailedRequest(
            job_ids=[str(uuid.uuid4()) for _ in range(10_000)],
            target_ids=[f"t{i}" for i in range(10_000)],
        ),
    ),
    ("1,000 stream job_ids of unknown jobs", "StreamJobUpdates", None),
]


async def call(service: Service, rpc: str, request: Any) -> grpc.StatusCode:
    """The status code of one call (streams: of the whole stream)."""
    method: Callable[..., Any] = getattr(service.stub, rpc)
    try:
        if rpc == "StreamJobUpdates":
            async for _ in method(request, timeout=10):
                pass
        else:
            await method(request, timeout=10)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_every_bad_field_is_invalid_argument_naming_it(service: Service) -> None:
    seen: dict[str, str] = {}
    for case, rpc, request, field in BAD_FIELDS:
        method: Callable[..., Any] = getattr(service.stub, rpc)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            if rpc == "StreamJobUpdates":
                async for _ in method(request, timeout=10):
                    pass
            else:
                await method(request, timeout=10)
        rich = rich_error(caught.value)
        seen[case] = rich.code.name
        assert rich.code == grpc.StatusCode.INVALID_ARGUMENT, (case, rich)
        assert field in rich.field_violations, (case, rich.field_violations)
        assert "SELECT" not in rich.message and "INSERT" not in rich.message, case
        # Nothing is echoed at length, however long the value was.
        assert len(rich.message) < 2_000, (case, len(rich.message))
    assert set(seen.values()) == {"INVALID_ARGUMENT"}
    # The service still serves, and nothing bad was stored.
    await service.stub.Enqueue(card("after-the-storm"))
    assert [j.target_id for j in await list_all(service.stub)] == ["after-the-storm"]


async def test_requests_at_the_edge_of_every_bound_are_served(service: Service) -> None:
    for case, rpc, request in GOOD_EDGES:
        if request is None:  # unknown ids: NOT_FOUND, found with 1,000 ids in one query
            request = pb.StreamJobUpdatesRequest(job_ids=[str(uuid.uuid4()) for _ in range(1000)])
            assert await call(service, rpc, request) == grpc.StatusCode.NOT_FOUND, case
            continue
        assert await call(service, rpc, request) == grpc.StatusCode.OK, case


async def test_bad_utf8_on_the_wire_is_invalid_argument_naming_the_field(
    service: Service,
) -> None:
    """A lone surrogate has no UTF-8 form: it can only arrive as bytes protobuf refuses.
    gRPC alone answers such a request UNKNOWN."""
    lone_surrogate = b"\xed\xa0\x80"  # U+D800 encoded as if it were a character
    good = card("scrap-1", text="Some text.")
    raw = good.SerializeToString()
    bad_target = raw.replace(b"scrap-1", b"scr" + lone_surrogate + b"p")
    bad_text = raw.replace(b"Some text.", b"Some" + lone_surrogate + b"xt.")  # same length
    cases = [
        ("Enqueue", bad_target, "target_id"),
        ("Enqueue", bad_text, "card_analysis_input.text"),
        ("GetJob", b"\x0a\x02\xff\xfe", "job_id"),
        (
            "ListJobs",
            pb.ListJobsRequest(page_token="x").SerializeToString()[:-1] + b"\xff",
            "page_token",
        ),
    ]
    for rpc, payload, field in cases:
        raw_call = service.channel.unary_unary(
            f"/san.jobs.v1.JobService/{rpc}",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw_call(payload, timeout=10)
        rich = rich_error(caught.value)
        assert rich.code == grpc.StatusCode.INVALID_ARGUMENT, (rpc, field, rich)
        assert field in rich.field_violations, (rpc, rich.field_violations)
    stream_call = service.channel.unary_stream(
        "/san.jobs.v1.JobService/StreamJobUpdates",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stream_call(b"\x0a\x01\xff", timeout=10):
            pass
    assert rich_error(caught.value).field_violations.keys() == {"job_ids[0]"}
    # Not a message at all (a truncated field): INVALID_ARGUMENT too.
    raw_get = service.channel.unary_unary(
        "/san.jobs.v1.JobService/GetJob",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw_get(b"\x0a\x50abc", timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_sdk_sends_a_poison_input_once(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point 4: a NUL in target_id was UNAVAILABLE on PostgreSQL, which the SDK retries."""
    enqueues_seen = 0
    rule = request_rules.enqueue

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal enqueues_seen
        enqueues_seen += 1
        return rule(*args, **kwargs)

    monkeypatch.setattr(request_rules, "enqueue", counting)
    async with AsyncJobsClient(service.runtime.address) as client:
        with pytest.raises(InvalidRequestError) as caught:
            await client.enqueue("scrap\x00-1", CardAnalysisInput(text="Some text."))
    assert "target_id" in {v.field for v in caught.value.field_violations}
    assert enqueues_seen == 1


async def test_a_message_over_max_message_bytes_is_resource_exhausted(service: Service) -> None:
    assert service.runtime.settings.max_message_bytes == 4 * MiB
    error = await _error(service.stub.Enqueue(card(url="u" * (4 * MiB + 1))))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # The connection and the service are fine afterwards.
    await service.stub.Enqueue(card("next"))


async def _error(awaitable: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await awaitable
    return caught.value


# 100,000 characters of 4 UTF-8 bytes each: 400,000 bytes of input per job.
BIG_TEXT = "\U0001d11e" * limits.DEFAULT_MAX_TEXT_CHARS


async def test_enqueue_echoes_no_input_and_get_job_returns_it(service: Service) -> None:
    response = await service.stub.Enqueue(
        card_request("big-1", BIG_TEXT, requested_by="u", request_id="req-big-1")
    )
    assert response.job.WhichOneof("input") is None
    assert response.ByteSize() < 1_000
    assert response.job.target_id == "big-1" and response.job.requested_by == "u"
    # The same request_id returns the stored job, whatever its status by now (a
    # duplicate by target would race with the worker finishing the first job).
    again = await service.stub.Enqueue(
        card_request("big-1", BIG_TEXT, requested_by="u", request_id="req-big-1")
    )
    assert again.deduplicated and again.job.id == response.job.id
    assert again.job.WhichOneof("input") is None
    got = (await service.stub.GetJob(pb.GetJobRequest(job_id=response.job.id))).job
    assert got.card_analysis_input.text == BIG_TEXT


async def test_list_jobs_pages_fit_the_send_limit_whatever_the_jobs_hold(
    service: Service,
) -> None:
    """12 jobs of 400 KB each: one page of 50 would be 4.8 MB, over the 4 MiB limit."""
    ids = set()
    for index in range(12):
        response = await service.stub.Enqueue(card_request(f"big-{index}", BIG_TEXT))
        ids.add(response.job.id)
    pages: list[pb.ListJobsResponse] = []
    token = ""
    while True:
        page = await service.stub.ListJobs(pb.ListJobsRequest(page_size=50, page_token=token))
        pages.append(page)
        assert page.ByteSize() <= service.runtime.settings.max_message_bytes
        token = page.next_page_token
        if not token:
            break
    assert len(pages) >= 2 and all(page.jobs for page in pages)
    assert 0 < len(pages[0].jobs) < 12
    listed = [job.id for page in pages for job in page.jobs]
    assert sorted(listed) == sorted(ids)  # every job once, none twice
    assert all(job.card_analysis_input.text == BIG_TEXT for page in pages for job in page.jobs)
