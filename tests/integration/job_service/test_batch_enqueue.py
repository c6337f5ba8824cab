"""BatchEnqueue over real gRPC, on SQLite and PostgreSQL: each item answered alone, in
request order, exactly as an Enqueue of it would be (issue 15, point 1)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import pytest

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Fail, Hang
from tests.support.jobs_api import card_request, list_all, wait_terminal
from tests.support.rich_errors import rich_error, status_error

ACTIVE = (pb.JOB_STATUS_PENDING, pb.JOB_STATUS_PROCESSING)


def batch(*requests: pb.EnqueueRequest) -> pb.BatchEnqueueRequest:
    return pb.BatchEnqueueRequest(requests=list(requests))


def created(result: pb.BatchEnqueueResult) -> pb.Job:
    assert result.WhichOneof("outcome") == "response", result
    assert not result.response.deduplicated
    return result.response.job


def deduplicated(result: pb.BatchEnqueueResult) -> pb.Job:
    assert result.WhichOneof("outcome") == "response", result
    assert result.response.deduplicated
    return result.response.job


async def active_jobs(service: Service) -> list[pb.Job]:
    return [j for j in await list_all(service.stub) if j.status in ACTIVE]


async def test_mixed_batch_answers_each_item_in_order(service: Service) -> None:
    service.gateway.script = lambda _job, _attempt: Hang()  # jobs stay active
    existing = (await service.stub.Enqueue(card_request("held", "already there"))).job
    response = await service.stub.BatchEnqueue(
        batch(
            card_request("a", "first", requested_by="user-1"),  # 0: created
            card_request("", "no target"),  # 1: invalid
            card_request("held", "again"),  # 2: active duplicate, REJECT
            card_request(
                "held", "again", on_duplicate=pb.ON_DUPLICATE_RETURN_EXISTING
            ),  # 3: the existing job
            card_request("a", "same target as item 0"),  # 4: in-batch duplicate, REJECT
            card_request("b", "keyed", request_id="key-b"),  # 5: created
            card_request("c", "same key as item 5", request_id="key-b"),  # 6: item 5's job
            pb.EnqueueRequest(target_id="d"),  # 7: invalid: no type, no input
        )
    )
    results = response.results
    assert len(results) == 8

    first = created(results[0])
    assert first.target_id == "a" and first.requested_by == "user-1"
    assert first.status == pb.JOB_STATUS_PENDING
    assert first.WhichOneof("input") is None  # as Enqueue answers: no input

    invalid = status_error(results[1].error)
    assert invalid.code == grpc.StatusCode.INVALID_ARGUMENT
    assert list(invalid.field_violations) == ["requests[1].target_id"]

    duplicate = status_error(results[2].error)
    assert duplicate.code == grpc.StatusCode.ALREADY_EXISTS
    assert (duplicate.reason, duplicate.domain) == ("DUPLICATE_JOB", "jobs.san")
    assert duplicate.metadata == {"existingJobId": existing.id}

    assert deduplicated(results[3]).id == existing.id

    in_batch = status_error(results[4].error)
    assert in_batch.code == grpc.StatusCode.ALREADY_EXISTS
    assert in_batch.metadata == {"existingJobId": first.id}  # the earlier item wins

    keyed = created(results[5])
    assert deduplicated(results[6]).id == keyed.id
    assert keyed.target_id == "b"

    no_type = status_error(results[7].error)
    assert no_type.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "requests[7].job_type" in no_type.field_violations

    # What the answer promised is what is stored, and nothing else.
    stored = {j.id: j for j in await list_all(service.stub)}
    assert set(stored) == {existing.id, first.id, keyed.id}
    got = (await service.stub.GetJob(pb.GetJobRequest(job_id=first.id))).job
    assert got.card_analysis_input.text == "first"


async def test_a_resent_batch_returns_the_same_jobs(service: Service) -> None:
    """request_id per item makes a batch whose answer was lost safe to send again."""
    service.gateway.script = lambda _job, _attempt: Hang()
    request = batch(*(card_request(f"t-{i}", "text", request_id=f"r-{i}") for i in range(30)))
    first = await service.stub.BatchEnqueue(request)
    again = await service.stub.BatchEnqueue(request)
    first_ids = [created(r).id for r in first.results]
    assert [deduplicated(r).id for r in again.results] == first_ids
    assert len(set(first_ids)) == 30
    assert len(await list_all(service.stub)) == 30


async def test_a_large_batch_is_stored_in_request_order(service: Service) -> None:
    service.gateway.script = lambda _job, _attempt: Hang()
    count = 1_000  # more than one INSERT (at most 500 rows each)
    response = await service.stub.BatchEnqueue(
        batch(*(card_request(f"n-{i}", f"text {i}") for i in range(count)))
    )
    jobs = [created(r) for r in response.results]
    assert [j.target_id for j in jobs] == [f"n-{i}" for i in range(count)]
    assert len({j.id for j in jobs}) == count
    stored = {j.id: j.target_id for j in await list_all(service.stub)}
    assert stored == {j.id: j.target_id for j in jobs}


@pytest.mark.parametrize("count", [0, 1_001])
async def test_an_empty_or_too_long_batch_fails_as_a_whole(service: Service, count: int) -> None:
    request = batch(*(card_request(f"x-{i}", "text") for i in range(count)))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await service.stub.BatchEnqueue(request)
    error = rich_error(caught.value)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert list(error.field_violations) == ["requests"]
    assert await list_all(service.stub) == []


async def test_the_answer_is_the_ground_truth_when_racing_single_enqueues(
    service: Service,
) -> None:
    """Batches and single Enqueues on the same targets at once: every target ends
    with exactly one active job, and every answer names that job."""
    service.gateway.script = lambda _job, _attempt: Hang()
    targets = [f"race-{i}" for i in range(200)]

    async def single(target: str) -> tuple[str, str]:
        try:
            job = (await service.stub.Enqueue(card_request(target, "single"))).job
        except grpc.aio.AioRpcError as error:
            rich = rich_error(error)
            assert rich.code == grpc.StatusCode.ALREADY_EXISTS, rich
            return target, rich.metadata["existingJobId"]
        return target, job.id

    async def batched(order: list[str]) -> list[tuple[str, str]]:
        response = await service.stub.BatchEnqueue(batch(*(card_request(t, "b") for t in order)))
        answers = []
        for target, result in zip(order, response.results, strict=True):
            if result.WhichOneof("outcome") == "response":
                answers.append((target, created(result).id))
            else:
                rich = status_error(result.error)
                assert rich.code == grpc.StatusCode.ALREADY_EXISTS, rich
                answers.append((target, rich.metadata["existingJobId"]))
        return answers

    calls = [batched(targets), batched(targets[::-1])]
    calls += [single(t) for t in targets[::3]]
    answered = await asyncio.gather(*calls)
    answers = [a for group in answered for a in (group if isinstance(group, list) else [group])]

    active = await active_jobs(service)
    by_target = {j.target_id: j.id for j in active}
    assert len(active) == len(targets) == len(by_target)  # exactly one each
    for target, job_id in answers:
        assert by_target[target] == job_id


async def test_without_auth_requested_by_is_each_item_s_own(service: Service) -> None:
    """(Under --auth token it is the token's name: test_auth_roles.py.)"""
    service.gateway.script = lambda _job, _attempt: Hang()
    response = await service.stub.BatchEnqueue(
        batch(card_request("p", "x", requested_by="u-1"), card_request("q", "y"))
    )
    assert [created(r).requested_by for r in response.results] == ["u-1", ""]
    assert uuid.UUID(created(response.results[1]).id)


async def test_a_full_batch_at_the_message_limit_is_served(service: Service) -> None:
    """1,000 items that together come just under --max-message-bytes (4 MiB)."""
    service.gateway.script = lambda _job, _attempt: Hang()
    text = "x" * 4_000
    request = batch(*(card_request(f"big-{i}", text) for i in range(1_000)))
    assert request.ByteSize() < 4 * 1024 * 1024
    response = await service.stub.BatchEnqueue(request, timeout=60)
    assert len({created(r).id for r in response.results}) == 1_000


async def test_a_batch_over_the_message_limit_is_resource_exhausted(service: Service) -> None:
    request = batch(*(card_request(f"big-{i}", "x" * 4_400) for i in range(1_000)))
    assert request.ByteSize() > 4 * 1024 * 1024
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await service.stub.BatchEnqueue(request, timeout=60)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Still serving, and nothing of it stored.
    assert created((await service.stub.BatchEnqueue(batch(card_request("after", "x")))).results[0])
    assert [j.target_id for j in await list_all(service.stub)] == ["after"]


async def test_every_item_failing_with_many_violations_still_fits_the_answer(
    service: Service,
) -> None:
    """The largest answer a request under the limit can cause: 1,000 items each
    with as many violations as an error lists (each cut short)."""
    item = pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_TIL_GENERATION,
        target_id="\x00",
        requested_by="\x00",
        request_id="\x00",
        til_generation_input=pb.TilGenerationInput(day="\x00", notes=["\x00"] * 1_000),
    )
    request = batch(*[item] * 1_000)
    assert request.ByteSize() < 4 * 1024 * 1024
    response = await service.stub.BatchEnqueue(request, timeout=60)
    assert len(response.results) == 1_000
    last = status_error(response.results[-1].error)
    assert last.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "requests[999].target_id" in last.field_violations
    print(f"\nanswer of {response.ByteSize():,} bytes for a request of {request.ByteSize():,}")


def raw_batch_call(service: Service) -> Any:
    """BatchEnqueue taking bytes as they are: what a client that does not check
    UTF-8 (C++, or a hand-written encoder) can send."""
    return service.channel.unary_unary(
        "/san.jobs.v1.JobService/BatchEnqueue",
        request_serializer=lambda b: b,
        response_deserializer=pb.BatchEnqueueResponse.FromString,
    )


async def test_bad_utf8_in_one_item_fails_that_item_alone(service: Service) -> None:
    """protobuf cannot parse a message holding a string that is not UTF-8: the batch
    is read item by item, and only the bad item is refused, naming its field."""
    service.gateway.script = lambda _job, _attempt: Hang()
    lone_surrogate = b"\xed\xa0\x80"
    raw = batch(
        card_request("fine-0", "x"), card_request("scrap-1", "x"), card_request("fine-2", "x")
    ).SerializeToString()
    payload = raw.replace(b"scrap-1", b"scr" + lone_surrogate + b"p")

    response = await raw_batch_call(service)(payload, timeout=10)

    first, bad, last = response.results
    rich = status_error(bad.error)
    assert rich.code == grpc.StatusCode.INVALID_ARGUMENT
    assert list(rich.field_violations) == ["requests[1].target_id"]
    assert "UTF-8" in rich.field_violations["requests[1].target_id"]
    stored = sorted(j.target_id for j in await list_all(service.stub))
    assert (
        stored
        == ["fine-0", "fine-2"]
        == sorted([created(first).target_id, created(last).target_id])
    )


async def test_an_item_that_is_not_a_message_fails_alone_and_a_broken_batch_whole(
    service: Service,
) -> None:
    service.gateway.script = lambda _job, _attempt: Hang()
    good = card_request("good", "x").SerializeToString()
    # Field 1 (requests), length-delimited: the good item, then 3 bytes that are no
    # EnqueueRequest (field 2 says 5 bytes follow, 1 does).
    payload = b"\x0a" + bytes([len(good)]) + good + b"\x0a\x03\x12\x05x"
    response = await raw_batch_call(service)(payload, timeout=10)
    assert created(response.results[0]).target_id == "good"
    rich = status_error(response.results[1].error)
    assert rich.code == grpc.StatusCode.INVALID_ARGUMENT
    assert list(rich.field_violations) == ["requests[1].request"]

    # A batch whose items cannot even be told apart is refused whole, naming none.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw_batch_call(service)(b"\x0a\x50" + good, timeout=10)
    whole = rich_error(caught.value)
    assert whole.code == grpc.StatusCode.INVALID_ARGUMENT
    assert list(whole.field_violations) == ["request"]
    assert [j.target_id for j in await list_all(service.stub)] == ["good"]


SMALL_LIMIT = 64 * 1024  # the smallest --max-message-bytes


async def test_a_resent_batch_of_finished_jobs_fits_the_answer_whatever_they_hold(
    start_service: StartService,
) -> None:
    """Resending a keyed batch after its jobs ended answers each with its existing job;
    60 failed jobs hold ~2 KB each (error and attempt), more than a 64 KiB answer
    holds. Stored and then unanswerable would leave the caller resending a batch that
    can never succeed: when the whole answer would not fit, existing jobs come
    without their stored content (GetJob has it), and the call succeeds."""
    service = await start_service(max_message_bytes=SMALL_LIMIT)
    why = "the provider refused: " + "reason " * 300
    service.gateway.script = lambda _job, _attempt: Fail(grpc.StatusCode.INVALID_ARGUMENT, why)
    request = batch(
        *(card_request(f"f-{i}", "text", request_id=f"k-{i}", max_attempts=1) for i in range(60))
    )
    ids = [created(r).id for r in (await service.stub.BatchEnqueue(request)).results]
    ended = await wait_terminal(service.stub, ids, timeout=30)
    assert {job.status for job in ended.values()} == {pb.JOB_STATUS_FAILED}
    full = (await service.stub.GetJob(pb.GetJobRequest(job_id=ids[0]))).job
    assert 60 * full.ByteSize() > SMALL_LIMIT  # the whole jobs would not fit

    again = await service.stub.BatchEnqueue(request)

    assert again.ByteSize() <= SMALL_LIMIT
    jobs = [deduplicated(r) for r in again.results]
    assert [j.id for j in jobs] == ids
    assert {(j.status, j.job_type) for j in jobs} == {
        (pb.JOB_STATUS_FAILED, pb.JOB_TYPE_CARD_ANALYSIS)
    }
    assert [(j.target_id, j.request_id) for j in jobs] == [(f"f-{i}", f"k-{i}") for i in range(60)]


async def test_a_batch_whose_answer_would_outgrow_the_limit_is_refused_before_storing(
    start_service: StartService,
) -> None:
    """An answer repeats each item's target and request_id and adds the job's id,
    times and the caller's trace: items of tiny inputs just under the request limit
    make an answer over it. Refused whole, before anything is stored (INVALID_ARGUMENT
    naming `requests`, saying how many items fit), never stored and then unanswerable."""
    service = await start_service(max_message_bytes=SMALL_LIMIT)
    service.gateway.script = lambda _job, _attempt: Hang()
    items = [
        card_request("t" * 200 + str(i), "x", request_id="r" * 200 + str(i)) for i in range(150)
    ]
    request = batch(*items)
    assert request.ByteSize() < SMALL_LIMIT
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await service.stub.BatchEnqueue(request)
    error = rich_error(caught.value)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert list(error.field_violations) == ["requests"]
    assert "--max-message-bytes" in error.field_violations["requests"]
    assert await list_all(service.stub) == []
    # Fewer of the same items go through, and their whole answer arrives.
    response = await service.stub.BatchEnqueue(batch(*items[:60]))
    assert len({created(r).id for r in response.results}) == 60


async def test_many_undecodable_items_each_fail_alone_and_too_many_fail_whole(
    service: Service,
) -> None:
    """1,000 items, each with a string that is not UTF-8: 1,000 answers naming each
    item, nothing stored; 1,001 such items: the whole call, naming requests. The server
    serves on."""
    lone_surrogate = b"\xed\xa0\x80"
    bad = (
        card_request("scrap-x", "x")
        .SerializeToString()
        .replace(b"scrap-x", b"scr" + lone_surrogate + b"x")
    )
    item = b"\x0a" + bytes([len(bad)]) + bad

    response = await raw_batch_call(service)(item * 1_000, timeout=30)

    assert len(response.results) == 1_000
    for index in (0, 999):
        rich = status_error(response.results[index].error)
        assert rich.code == grpc.StatusCode.INVALID_ARGUMENT
        assert list(rich.field_violations) == [f"requests[{index}].target_id"]
    assert await list_all(service.stub) == []

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw_batch_call(service)(item * 1_001, timeout=30)
    whole = rich_error(caught.value)
    assert whole.code == grpc.StatusCode.INVALID_ARGUMENT
    assert list(whole.field_violations) == ["requests"]
    assert created((await service.stub.BatchEnqueue(batch(card_request("after", "x")))).results[0])
