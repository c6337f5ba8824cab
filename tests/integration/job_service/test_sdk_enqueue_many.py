"""The SDK's enqueue_many (sync and asyncio clients) against a real JobService on
SQLite and PostgreSQL: chunks of at most batch_size, one outcome per request in
request order, item errors as the typed exceptions enqueue raises."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from san_jobs.client import (
    AsyncJobsClient,
    CardAnalysisInput,
    DuplicateJobError,
    EnqueueOutcome,
    EnqueueRequest,
    InvalidRequestError,
    JobsClient,
    ServiceUnavailableError,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Hang
from tests.support.jobs_api import card_request, list_all
from tests.support.tcp_proxy import TcpProxy


def mixed_requests(existing_target: str, key: str) -> list[EnqueueRequest]:
    return [
        card_request("mixed-a", "first"),  # 0: created
        card_request("", "no target"),  # 1: invalid
        card_request(existing_target, "again"),  # 2: ALREADY_EXISTS, the existing id
        # 3: the existing job, deduplicated
        card_request(existing_target, "again", on_duplicate=pb.ON_DUPLICATE_RETURN_EXISTING),
        # 4: the job type left out: inferred from the input, as enqueue does
        EnqueueRequest(target_id="mixed-b", card_analysis_input=CardAnalysisInput(text="x")),
        card_request("mixed-c", "same key as before", request_id=key),  # 5: deduplicated
    ]


def check_mixed(outcomes: Sequence[EnqueueOutcome], existing_id: str, keyed_id: str) -> None:
    assert len(outcomes) == 6
    first, invalid, rejected, returned, inferred, keyed = outcomes
    assert first.ok and first.job is not None and first.job.target_id == "mixed-a"
    assert not first.deduplicated
    assert isinstance(invalid.error, InvalidRequestError) and invalid.job is None
    # Named as Enqueue names it, not "requests[1].target_id" (the index of one call).
    assert [v.field for v in invalid.error.field_violations] == ["target_id"]
    assert isinstance(rejected.error, DuplicateJobError)
    assert rejected.error.existing_job_id == existing_id
    assert returned.ok and returned.deduplicated and returned.job is not None
    assert returned.job.id == existing_id
    assert inferred.ok and inferred.job is not None and inferred.job.target_id == "mixed-b"
    assert keyed.deduplicated and keyed.job is not None and keyed.job.id == keyed_id


async def test_async_client_answers_each_request_in_order(service: Service) -> None:
    service.gateway.script = lambda _job, _attempt: Hang()  # jobs stay active
    async with AsyncJobsClient(service.runtime.address) as client:
        existing = (await client.enqueue("mixed-held", CardAnalysisInput(text="held"))).job
        keyed = (await client.enqueue("mixed-k", CardAnalysisInput(text="k"), request_id="k-1")).job
        outcomes = await client.enqueue_many(mixed_requests("mixed-held", "k-1"))
    check_mixed(outcomes, existing.id, keyed.id)


async def test_sync_client_answers_each_request_in_order(service: Service) -> None:
    service.gateway.script = lambda _job, _attempt: Hang()
    address = service.runtime.address

    def run() -> tuple[list[EnqueueOutcome], str, str]:
        with JobsClient(address) as client:
            existing = client.enqueue("mixed-held", CardAnalysisInput(text="held")).job
            keyed = client.enqueue("mixed-k", CardAnalysisInput(text="k"), request_id="k-1").job
            return client.enqueue_many(mixed_requests("mixed-held", "k-1")), existing.id, keyed.id

    # The sync client blocks: in a thread, so the in-process server keeps serving.
    outcomes, existing_id, keyed_id = await asyncio.to_thread(run)
    check_mixed(outcomes, existing_id, keyed_id)


async def test_1200_requests_go_in_chunks_of_batch_size(service: Service) -> None:
    requests = (card_request(f"many-{i}", f"text {i}") for i in range(1_200))  # lazy
    chunks: list[tuple[int, int]] = []
    async with AsyncJobsClient(service.runtime.address, timeout=60) as client:
        outcomes = await client.enqueue_many(
            requests, batch_size=500, on_chunk=lambda start, got: chunks.append((start, len(got)))
        )
    assert chunks == [(0, 500), (500, 500), (1_000, 200)]
    assert [o.job.target_id for o in outcomes if o.job is not None] == [
        f"many-{i}" for i in range(1_200)
    ]
    assert len({o.job.id for o in outcomes if o.job is not None}) == 1_200
    assert not any(o.deduplicated or o.error for o in outcomes)


async def test_sync_client_cuts_chunks_by_bytes_too(service: Service) -> None:
    address = service.runtime.address
    requests = [card_request(f"bytes-{i}", "x" * 1_000) for i in range(10)]

    def run() -> tuple[list[EnqueueOutcome], list[int]]:
        sizes: list[int] = []
        with JobsClient(address) as client:
            outcomes = client.enqueue_many(
                requests, max_batch_bytes=2_500, on_chunk=lambda _s, got: sizes.append(len(got))
            )
        return outcomes, sizes

    outcomes, sizes = await asyncio.to_thread(run)
    assert sizes == [2, 2, 2, 2, 2]  # two ~1 KB requests fit in 2,500 bytes, three do not
    assert [o.job.target_id for o in outcomes if o.job] == [f"bytes-{i}" for i in range(10)]
    assert all(not r.request_id for r in requests)  # the caller's messages untouched


async def test_a_request_over_the_server_limit_is_its_own_outcome(
    start_service: StartService,
) -> None:
    service = await start_service(max_message_bytes=64 * 1024)
    big = card_request("too-big", "y" * 90_000)
    async with AsyncJobsClient(service.runtime.address) as client:
        outcomes = await client.enqueue_many(
            [card_request("small-1", "a"), big, card_request("small-2", "b")],
            max_batch_bytes=50_000,
        )
    assert outcomes[0].ok and outcomes[2].ok
    assert outcomes[1].error is not None
    assert outcomes[1].error.code.name == "RESOURCE_EXHAUSTED"


def long_keyed(count: int) -> list[EnqueueRequest]:
    """Requests of tiny inputs and long keys: 150 of them fit under 64 KiB, their
    answer does not (JobService refuses the call before storing anything)."""
    return [
        card_request(f"{i:03d}" + "t" * 200, "x", request_id=f"{i:03d}" + "r" * 200)
        for i in range(count)
    ]


@pytest.mark.parametrize("client_kind", ["async", "sync"])
async def test_a_call_refused_for_its_answer_size_is_sent_again_in_halves(
    start_service: StartService, client_kind: str
) -> None:
    service = await start_service(max_message_bytes=64 * 1024)
    service.gateway.script = lambda _job, _attempt: Hang()
    requests = long_keyed(150)
    calls: list[tuple[int, int]] = []

    def heard(start: int, got: Sequence[EnqueueOutcome]) -> None:
        calls.append((start, len(got)))

    if client_kind == "async":
        async with AsyncJobsClient(service.runtime.address) as client:
            outcomes = await client.enqueue_many(requests, on_chunk=heard)
    else:

        def run() -> list[EnqueueOutcome]:
            with JobsClient(service.runtime.address) as sync_client:
                return sync_client.enqueue_many(requests, on_chunk=heard)

        outcomes = await asyncio.to_thread(run)

    assert calls == [(0, 75), (75, 75)]  # 150 refused whole, then two halves
    assert [o.job.target_id for o in outcomes if o.job is not None] == [
        r.target_id for r in requests
    ]
    assert not any(o.deduplicated or o.error for o in outcomes)
    assert len(await list_all(service.stub)) == 150


async def test_batch_size_is_checked_before_any_call() -> None:
    async with AsyncJobsClient("127.0.0.1:1") as client:
        for bad in (0, 1_001):
            with pytest.raises(ValueError, match="batch_size"):
                await client.enqueue_many([card_request("a", "b")], batch_size=bad)
        assert await client.enqueue_many([]) == []  # nothing to send: no call at all


async def test_a_call_failing_as_a_whole_raises_after_the_chunks_before(
    service: Service,
) -> None:
    port = int(service.runtime.address.rsplit(":", 1)[1])
    seen: list[int] = []
    with TcpProxy("127.0.0.1", port) as proxy:
        async with AsyncJobsClient(f"127.0.0.1:{proxy.port}") as client:

            def cut_after_first(start: int, _got: Sequence[EnqueueOutcome]) -> None:
                seen.append(start)
                proxy.cut()  # JobService gone between the first answer and the next call

            with pytest.raises(ServiceUnavailableError):
                await client.enqueue_many(
                    (card_request(f"gone-{i}", "t") for i in range(4)),
                    batch_size=2,
                    on_chunk=cut_after_first,
                )
    assert seen == [0]
