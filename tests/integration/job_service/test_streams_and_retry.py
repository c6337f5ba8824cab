"""StreamJobUpdates and RetryFailed over real gRPC, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from san_jobs.job_service.updates import Subscription, UpdateHub
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Fail, Hang, Held, Slow
from tests.support.jobs_api import card_request, wait_terminal
from tests.support.rich_errors import rich_error

UNAVAILABLE = Fail(grpc.StatusCode.UNAVAILABLE, "connection refused")


def subscribed(hub: UpdateHub) -> asyncio.Event:
    """An event set when the next stream has subscribed to `hub`: from then on that
    stream misses no change (the servicer subscribes before anything else)."""
    event = asyncio.Event()
    subscribe = hub.subscribe

    def subscribe_and_tell(*args: Any, **kwargs: Any) -> Subscription:
        subscription = subscribe(*args, **kwargs)
        event.set()
        return subscription

    hub.subscribe = subscribe_and_tell  # type: ignore[method-assign]
    return event


async def test_stream_sends_snapshot_then_every_change_then_ends(
    start_service: StartService,
) -> None:
    # One worker slot, taken by a held job, and the one job claimed ahead of it (a
    # second blocker): the watched job is PENDING when its stream starts. Each step
    # then waits until the test has read the state before it, so no state can be
    # folded into the next (a stream keeps only a job's latest state).
    service = await start_service(workers=1)
    holds: dict[str, Held] = {}
    service.gateway.script = lambda job_id, _a: holds.setdefault(job_id, Held())
    blocker = (await service.stub.Enqueue(card_request("st-blocker", "Text."))).job
    await asyncio.wait_for(holds.setdefault(blocker.id, Held()).reached.wait(), 20)
    ahead = (await service.stub.Enqueue(card_request("st-ahead", "Text."))).job
    ahead_updates = service.stub.StreamJobUpdates(
        pb.StreamJobUpdatesRequest(job_ids=[ahead.id]), timeout=20
    )
    async for update in ahead_updates:  # until it is claimed ahead
        if update.job.status == pb.JOB_STATUS_PROCESSING:
            ahead_updates.cancel()
            break
    holds.setdefault(ahead.id, Held()).release()  # answers as soon as it is called
    job = (await service.stub.Enqueue(card_request("st-1", "Text."))).job
    stream = aiter(
        service.stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(job_ids=[job.id]), timeout=20)
    )
    seen = [await anext(stream)]  # the state at subscription
    holds[blocker.id].release()  # the slot frees: the job is claimed, its call held
    seen.append(await anext(stream))
    holds.setdefault(job.id, Held()).release()
    seen += [update async for update in stream]  # the stream ends by itself
    assert [(pb.JobStatus.Name(u.job.status), u.job.attempt_count) for u in seen] == [
        ("JOB_STATUS_PENDING", 0),
        ("JOB_STATUS_PROCESSING", 1),
        ("JOB_STATUS_COMPLETED", 1),
    ]
    # The job the worker published is whole (its input is not read back by the
    # outcome write but taken from the claim): the same as GetJob's.
    assert seen[-1].job == (await service.stub.GetJob(pb.GetJobRequest(job_id=job.id))).job
    assert seen[-1].job.card_analysis_input.text == "Text."


async def test_stream_of_a_finished_job_sends_its_state_and_ends(service: Service) -> None:
    job = (await service.stub.Enqueue(card_request("st-2", "Text."))).job
    await wait_terminal(service.stub, [job.id], timeout=20)
    updates = [
        u
        async for u in service.stub.StreamJobUpdates(
            pb.StreamJobUpdatesRequest(job_ids=[job.id]), timeout=5
        )
    ]
    assert [u.job.status for u in updates] == [pb.JOB_STATUS_COMPLETED]


async def test_stream_errors(service: Service) -> None:
    unknown = str(uuid.uuid4())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in service.stub.StreamJobUpdates(
            pb.StreamJobUpdatesRequest(job_ids=[unknown]), timeout=5
        ):
            pass
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in service.stub.StreamJobUpdates(
            pb.StreamJobUpdatesRequest(job_ids=[str(uuid.uuid4()) for _ in range(1001)]), timeout=5
        ):
            pass
    assert "job_ids" in rich_error(caught.value).field_violations


async def test_feed_streams_matching_changes(service: Service) -> None:
    service.gateway.script = lambda _j, _a: Fail(
        grpc.StatusCode.INTERNAL, "JSON Parse Error at line 1", "MALFORMED_RESPONSE"
    )
    feed_open = subscribed(service.runtime.hub)
    feed = service.stub.StreamJobUpdates(
        pb.StreamJobUpdatesRequest(statuses=[pb.JOB_STATUS_FAILED])
    )
    reader = asyncio.create_task(anext(aiter(feed)))
    await asyncio.wait_for(feed_open.wait(), 10)  # from here on no change is missed
    job = (await service.stub.Enqueue(card_request("feed-1", "Text."))).job
    first = await asyncio.wait_for(reader, 20)
    assert first.job.id == job.id and first.job.status == pb.JOB_STATUS_FAILED
    feed.cancel()
    # The job the worker published is whole: its input included, as GetJob reads it.
    assert first.job == (await service.stub.GetJob(pb.GetJobRequest(job_id=job.id))).job


async def test_client_that_goes_away_is_cleaned_up(service: Service) -> None:
    service.gateway.script = lambda _j, _a: Hang()
    job = (await service.stub.Enqueue(card_request("gone", "Text."))).job
    call = service.stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(job_ids=[job.id]))
    await anext(aiter(call))
    assert service.runtime.hub.subscription_count == 1
    call.cancel()
    for _ in range(100):
        if service.runtime.hub.subscription_count == 0:
            break
        await asyncio.sleep(0.01)
    assert service.runtime.hub.subscription_count == 0


async def test_a_thousand_streams_at_once_are_all_served(start_service: StartService) -> None:
    service = await start_service(workers=50)
    service.gateway.script = lambda _j, _a: Slow(0.5)
    ids = [
        (await service.stub.Enqueue(card_request(f"many-{i}", "Text."))).job.id for i in range(50)
    ]

    async def watch(job_id: str) -> int:
        statuses = [
            u.job.status
            async for u in service.stub.StreamJobUpdates(
                pb.StreamJobUpdatesRequest(job_ids=[job_id]), timeout=60
            )
        ]
        assert statuses[-1] == pb.JOB_STATUS_COMPLETED
        return len(statuses)

    counts = await asyncio.gather(*(watch(ids[i % 50]) for i in range(1000)))
    assert len(counts) == 1000 and min(counts) >= 1
    assert service.runtime.hub.subscription_count == 0


async def test_retry_failed_moves_each_failed_job_once(service: Service) -> None:
    service.gateway.script = lambda _j, _a: Fail(
        grpc.StatusCode.INTERNAL, "JSON Parse Error at line 4", "MALFORMED_RESPONSE"
    )
    ids = [(await service.stub.Enqueue(card_request(f"rf-{i}", "Text."))).job.id for i in range(20)]
    failed = await wait_terminal(service.stub, ids, timeout=20)
    assert {j.status for j in failed.values()} == {pb.JOB_STATUS_FAILED}
    dry = await service.stub.RetryFailed(
        pb.RetryFailedRequest(error_message_contains="JSON Parse", dry_run=True)
    )
    assert (dry.matched_count, dry.retried_count, len(dry.job_ids)) == (20, 0, 20)
    assert (
        await service.stub.GetJob(pb.GetJobRequest(job_id=ids[0]))
    ).job.status == pb.JOB_STATUS_FAILED
    service.gateway.script = lambda _j, _a: Hang()
    racers = await asyncio.gather(
        *(
            service.stub.RetryFailed(
                pb.RetryFailedRequest(error_message_contains="JSON Parse", requested_by=f"op-{i}")
            )
            for i in range(8)
        )
    )
    moved = [job_id for r in racers for job_id in r.job_ids]
    assert sorted(moved) == sorted(ids), "every failed job moved exactly once across racing calls"
    assert sum(r.retried_count for r in racers) == 20


async def test_retry_failed_filters_limit_history_and_skips(service: Service) -> None:
    service.gateway.script = lambda _j, _a: Fail(
        grpc.StatusCode.INTERNAL, "JSON Parse Error at line 4", "MALFORMED_RESPONSE"
    )
    ids = [(await service.stub.Enqueue(card_request(f"rh-{i}", "Text."))).job.id for i in range(4)]
    await wait_terminal(service.stub, ids, timeout=20)
    # Retried jobs now succeed; the new job below hangs, holding its target's slot.
    service.gateway.script = lambda job_id, _a: None if job_id in ids else Hang()
    # rh-0 gets a new active job: its failed one must be skipped, not fail the call.
    active = (await service.stub.Enqueue(card_request("rh-0", "Text."))).job
    limited = await service.stub.RetryFailed(pb.RetryFailedRequest(job_ids=ids[2:], limit=1))
    assert limited.retried_count == 1
    result = await service.stub.RetryFailed(pb.RetryFailedRequest(all_failed=True))
    assert result.retried_count == 2
    assert [(s.job_id, active.id in s.reason) for s in result.skipped] == [(ids[0], True)]
    healed = await wait_terminal(service.stub, ids[1:], timeout=20)
    for job in healed.values():
        assert job.status == pb.JOB_STATUS_COMPLETED
        assert [a.error_code for a in job.attempts][:1] == ["INTERNAL"], "history kept"
        assert job.attempts[-1].error_code == ""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await service.stub.RetryFailed(pb.RetryFailedRequest())
    assert "all_failed" in rich_error(caught.value).field_violations


async def test_retry_failed_grants_a_fresh_round_of_attempts(start_service: StartService) -> None:
    service = await start_service(max_attempts=2)
    service.gateway.script = lambda _j, _a: UNAVAILABLE
    job = (await service.stub.Enqueue(card_request("round", "Text."))).job
    assert (await wait_terminal(service.stub, [job.id], timeout=20))[job.id].attempt_count == 2
    service.gateway.script = lambda _j, attempt: UNAVAILABLE if attempt < 4 else None
    await service.stub.RetryFailed(pb.RetryFailedRequest(job_ids=[job.id]))
    final = (await wait_terminal(service.stub, [job.id], timeout=20))[job.id]
    assert final.status == pb.JOB_STATUS_COMPLETED
    assert final.attempt_count == 4 and final.max_attempts == 4


async def test_health_and_reflection(service: Service) -> None:
    health = health_pb2_grpc.HealthStub(service.channel)
    for name in ("", "san.jobs.v1.JobService"):
        answer = await health.Check(health_pb2.HealthCheckRequest(service=name))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(service.channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    async for answer in reflection.ServerReflectionInfo(iter([request])):
        names = {s.name for s in answer.list_services_response.service}
        assert "san.jobs.v1.JobService" in names
        break


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_stream_on_one_instance_sees_work_of_another(start_service: StartService) -> None:
    watcher = await start_service(instance_id="watcher")
    await watcher.runtime.worker.stop(0)  # this instance only serves streams
    runner = await start_service(instance_id="runner")
    job = (await watcher.stub.Enqueue(card_request("x-inst", "Text."))).job
    updates = [
        u.job
        async for u in watcher.stub.StreamJobUpdates(
            pb.StreamJobUpdatesRequest(job_ids=[job.id]), timeout=20
        )
    ]
    assert updates[-1].status == pb.JOB_STATUS_COMPLETED
    assert runner.gateway.calls[job.id] == 1


async def test_health_turns_not_serving_at_shutdown(start_service: StartService) -> None:
    service = await start_service(grace=1.0)
    hold = Held()
    service.gateway.script = lambda _j, _a: hold
    await service.stub.Enqueue(card_request("shut", "Text."))
    await asyncio.wait_for(hold.reached.wait(), 10)  # in flight: shutdown has to wait for it
    health = health_pb2_grpc.HealthStub(service.channel)
    watch = health.Watch(health_pb2.HealthCheckRequest(service="san.jobs.v1.JobService"))
    assert (await anext(aiter(watch))).status == health_pb2.HealthCheckResponse.SERVING
    stopping = asyncio.create_task(service.runtime.stop())
    answer = await asyncio.wait_for(anext(aiter(watch)), 5)
    assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert not stopping.done(), "health must turn before in-flight work is finished"
    hold.release()
    await stopping


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_cancel_on_one_instance_stops_the_call_on_another(
    start_service: StartService,
) -> None:
    front = await start_service(instance_id="front")
    await front.runtime.worker.stop(0)  # only the back instance runs jobs
    back = await start_service(instance_id="back")
    back.gateway.script = lambda _j, _a: Hang()
    job = (await front.stub.Enqueue(card_request("x-cancel", "Text."))).job
    for _ in range(200):
        current = (await front.stub.GetJob(pb.GetJobRequest(job_id=job.id))).job
        if current.status == pb.JOB_STATUS_PROCESSING:
            break
        await asyncio.sleep(0.02)
    await front.stub.CancelJob(pb.CancelJobRequest(job_id=job.id, reason="user left"))
    for _ in range(200):
        if job.id in back.gateway.cancelled:
            break
        await asyncio.sleep(0.02)
    assert job.id in back.gateway.cancelled, "NOTIFY must stop the other instance's call"
    assert back.runtime.worker.in_flight == 0


async def test_a_stuck_client_blocks_neither_the_worker_nor_other_streams(
    start_service: StartService,
) -> None:
    service = await start_service(workers=20)
    feed_open = subscribed(service.runtime.hub)
    # A connection of its own whose receive window stays at HTTP/2's 64 KiB: with
    # grpc's bandwidth probing a busy client's window can grow past everything sent
    # here (seen under full-suite load on PostgreSQL), and the stream is not stuck.
    stuck_channel = grpc.aio.insecure_channel(
        service.runtime.address, options=[("grpc.http2.bdp_probe", 0)]
    )
    stuck = pb_grpc.JobServiceStub(stuck_channel).StreamJobUpdates(
        pb.StreamJobUpdatesRequest()
    )  # never read
    await asyncio.wait_for(feed_open.wait(), 10)
    # Big jobs (45 KB each) fill the stuck stream's flow-control window at once.
    big_text = "Queues keep work safe. " * 2000
    ids = [
        (await service.stub.Enqueue(card_request(f"stuck-{i}", big_text))).job.id
        for i in range(150)
    ]
    final = await wait_terminal(service.stub, ids, timeout=60)
    assert {j.status for j in final.values()} == {pb.JOB_STATUS_COMPLETED}
    # The stuck stream really is stuck (changes wait in its buffer), and its buffer
    # holds at most the latest state of each job, not every change.
    [feed] = list(service.runtime.hub._feeds)
    assert 0 < len(feed._buffer) <= len(ids)
    stuck.cancel()
    await stuck_channel.close()
