"""How JobService talks to AiGateway: every call of an instance over one StreamCalls
stream, many calls per message; a stream that breaks fails its calls as UNAVAILABLE
(retried) and the next call opens a new one; an older gateway without StreamCalls
is used through its unary RPCs."""

from __future__ import annotations

import asyncio

import grpc

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import StartService
from tests.integration.job_service.scripted_gateway import (
    Fail,
    Hang,
    ScriptedGateway,
    Slow,
    start_scripted_gateway,
)
from tests.support.jobs_api import card_request, free_port, wait_terminal


async def test_jobs_share_one_stream_and_calls_are_batched(start_service: StartService) -> None:
    service = await start_service(workers=20)
    service.gateway.script = lambda _job, _attempt: Slow(0.2)
    replies = await asyncio.gather(
        *(service.stub.Enqueue(card_request(f"s-{i}", f"Text {i}.")) for i in range(20))
    )
    ids = [reply.job.id for reply in replies]
    final = await wait_terminal(service.stub, ids, timeout=30)
    assert {job.status for job in final.values()} == {pb.JOB_STATUS_COMPLETED}
    assert final[ids[3]].card_analysis_result.summary == "Text 3."
    gateway = service.gateway
    assert gateway.stream_calls == 20 and sum(gateway.calls.values()) == 20
    assert gateway.streams_opened == 1, "one stream carries every call"
    assert gateway.largest_request > 1, "calls queued together travel in one message"


async def test_older_gateway_without_stream_calls_is_called_unary(
    start_service: StartService,
) -> None:
    gateway = ScriptedGateway(unary_only=True)
    server, address = await start_scripted_gateway(gateway)
    try:
        service = await start_service(gateway=address, max_attempts=1)
        too_long = Fail(
            grpc.StatusCode.INVALID_ARGUMENT, "Token limit exceeded (9 > 8)", "TOKEN_LIMIT_EXCEEDED"
        )
        gateway.script = lambda job_id, _attempt: too_long if job_id == bad_id else None
        bad_id = ""
        good = (await service.stub.Enqueue(card_request("u-1", "First. Second."))).job
        done = (await wait_terminal(service.stub, [good.id], timeout=30))[good.id]
        bad_id = (await service.stub.Enqueue(card_request("u-2", "Long."))).job.id
        failed = (await wait_terminal(service.stub, [bad_id], timeout=30))[bad_id]
    finally:
        await server.stop(None)
    assert done.status == pb.JOB_STATUS_COMPLETED and done.card_analysis_result.summary == "First."
    assert failed.status == pb.JOB_STATUS_FAILED
    assert (failed.error_code, failed.error_reason) == ("INVALID_ARGUMENT", "TOKEN_LIMIT_EXCEEDED")
    assert failed.error_message == "Token limit exceeded (9 > 8)"
    assert gateway.stream_calls == 0 and gateway.calls[good.id] == 1


async def test_a_broken_stream_fails_its_calls_as_unavailable_then_a_new_one_opens(
    start_service: StartService,
) -> None:
    address = f"127.0.0.1:{free_port()}"
    first = ScriptedGateway(script=lambda _job, _attempt: Hang())
    server, _ = await start_scripted_gateway(first, address)
    service = await start_service(gateway=address, max_attempts=3)
    job = (await service.stub.Enqueue(card_request("b-1", "Text."))).job
    for _ in range(200):
        if first.calls[job.id]:
            break
        await asyncio.sleep(0.02)
    assert first.calls[job.id] == 1
    await server.stop(None)  # the gateway goes away with the call in flight
    second = ScriptedGateway()
    server, _ = await start_scripted_gateway(second, address)
    try:
        final = (await wait_terminal(service.stub, [job.id], timeout=30))[job.id]
    finally:
        await server.stop(None)
    assert final.status == pb.JOB_STATUS_COMPLETED
    lost = final.attempts[0]
    assert lost.error_code == "UNAVAILABLE"
    assert lost.error_message.startswith("AI gateway unavailable:")
    assert second.streams_opened == 1 and second.calls[job.id] == 1
