"""StreamJobChanges under --auth token (issue 42, point 13), SQLite and PostgreSQL: a
submitter's stream is kept to its own jobs, and nothing it receives tells it how far
the feed moved with other tenants' changes (no progress mark at a position another's
change reached, no position in its cursors, no last position in a refusal)."""

from __future__ import annotations

import asyncio
import time
import uuid

import grpc
import pytest

from san_jobs.job_service.auth.roles import Role
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Hang
from tests.integration.job_service.test_auth_roles import add_token, bearer
from tests.support.jobs_api import SAMPLE_TEXT, card_request
from tests.support.rich_errors import rich_error

Metadata = tuple[tuple[str, str], ...]


async def _secured(start_service: StartService) -> tuple[Service, dict[str, Metadata]]:
    service = await start_service(auth="token", workers=1)
    service.gateway.script = lambda _job, _attempt: Hang()  # jobs stay cancellable
    # Marks at once while caught up, so the test needs no 5 s wait.
    service.runtime.change_feed.mark_interval = 0.05
    who = {
        name: bearer(await add_token(service, name, role))
        for name, role in (
            ("alice", Role.SUBMITTER),
            ("bob", Role.SUBMITTER),
            ("operator", Role.OPERATOR),
        )
    }
    return service, who


async def _cancelled(service: Service, who: dict[str, Metadata], name: str) -> str:
    """A job of `name`, cancelled by the operator: one change in the feed."""
    request = card_request(f"t-{uuid.uuid4().hex[:12]}", SAMPLE_TEXT)
    job = (await service.stub.Enqueue(request, metadata=who[name], timeout=10)).job
    cancel = pb.CancelJobRequest(job_id=job.id)
    await service.stub.CancelJob(cancel, metadata=who["operator"], timeout=10)
    return str(job.id)


async def _messages(
    service: Service,
    md: Metadata,
    seconds: float,
    until: set[str] | None = None,
    **filters: object,
) -> list[pb.StreamJobChangesResponse]:
    """Every message a stream from the start sends within `seconds`; with `until`,
    only until the changes of those jobs have all come, and a moment after, where
    any change it should not send would show too."""
    request = pb.StreamJobChangesRequest(**filters)  # type: ignore[arg-type]
    call = service.stub.StreamJobChanges(request, metadata=md, timeout=seconds + 10)
    got: list[pb.StreamJobChangesResponse] = []
    deadline = time.monotonic() + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = await asyncio.wait_for(call.read(), left)
            except TimeoutError:
                break
            assert message is not grpc.aio.EOF
            got.append(message)
            if until is not None and until <= {m.job.id for m in got if m.HasField("job")}:
                deadline = min(deadline, time.monotonic() + 0.3)
    finally:
        call.cancel()
    return got


async def _replayed(
    service: Service, md: Metadata, job_ids: set[str]
) -> list[pb.StreamJobChangesResponse]:
    """A replay from the start that must hold the changes of `job_ids`: up to 20 s,
    which a loaded machine may need before the first one comes."""
    return await _messages(service, md, 20.0, until=job_ids)


async def test_a_submitters_marks_stand_only_at_its_own_changes(
    start_service: StartService,
) -> None:
    service, who = await _secured(start_service)
    own = await _cancelled(service, who, "alice")
    others = [await _cancelled(service, who, "bob") for _ in range(5)]

    # The operator's feed: every change, and which cursor is whose.
    everything = await _replayed(service, who["operator"], {own, *others})
    cursor_of = {m.job.id: m.cursor for m in everything if m.HasField("job")}
    assert set(cursor_of) == {own, *others}
    # alice's own feed: her change, under a cursor sealed for her.
    (mine,) = [m.cursor for m in await _replayed(service, who["alice"], {own}) if m.job.id]

    # alice wants COMPLETED changes only: her CANCELLED one is skipped (a mark may
    # stand at it: she knows it), bob's are not hers to count, then or live.
    stream = asyncio.ensure_future(
        _messages(service, who["alice"], 1.5, statuses=[pb.JOB_STATUS_COMPLETED])
    )
    await asyncio.sleep(0.5)
    for _ in range(3):
        await _cancelled(service, who, "bob")
    messages = await stream
    assert not [m for m in messages if m.HasField("job")]
    marks = [m.cursor for m in messages]
    assert marks, "a mark over alice's own skipped change keeps her cursor moving"
    assert set(marks) == {mine}, f"marks at {marks}: alice's own change is at {mine}"
    # Resumed from her mark, her next change is the next thing she receives.
    later = await _cancelled(service, who, "alice")
    request = pb.StreamJobChangesRequest(after_cursor=marks[-1])
    call = service.stub.StreamJobChanges(request, metadata=who["alice"], timeout=10)
    try:
        first = await call.read()
    finally:
        call.cancel()
    assert first.job.id == later

    # A position she could craft, ahead of the feed or at another's change, is refused
    # as any malformed cursor is: the answer does not tell which (nor the last position).
    feed_id, _, pos = cursor_of[own].partition(".")
    for crafted in (f"{feed_id}.{int(pos) + 10_000}", cursor_of[others[-1]]):
        call = service.stub.StreamJobChanges(
            pb.StreamJobChangesRequest(after_cursor=crafted), metadata=who["alice"], timeout=10
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, crafted
        assert set(rich_error(caught.value).field_violations) == {"after_cursor"}
        assert "last position" not in (caught.value.details() or "")


async def test_a_submitters_cursors_hold_no_position(start_service: StartService) -> None:
    """Two of alice's changes with five of bob's between them: her cursors do not say
    how far apart they are (a plain `<feed>.<position>` said 6), they resume her
    stream only (bob's and the operator's refuse them), and a plain cursor an older
    instance gave her (at her own change) still resumes (a rolling upgrade)."""
    service, who = await _secured(start_service)
    first = await _cancelled(service, who, "alice")
    for _ in range(5):
        await _cancelled(service, who, "bob")
    second = await _cancelled(service, who, "alice")
    everything = await _replayed(service, who["operator"], {first, second})
    plain = {m.job.id: m.cursor for m in everything if m.HasField("job")}
    mine = await _replayed(service, who["alice"], {first, second})
    got = {m.job.id: m.cursor for m in mine if m.job.id}
    assert set(got) == {first, second}
    feed_id = plain[first].split(".")[0]
    for cursor in got.values():
        assert cursor.startswith(f"{feed_id}~"), cursor
        assert not {c.split(".")[1] for c in plain.values()} & set(cursor.split("~")[1:])
    assert len(got[first]) == len(got[second]) <= 128

    async def first_answer(cursor: str, name: str) -> pb.StreamJobChangesResponse:
        request = pb.StreamJobChangesRequest(after_cursor=cursor)
        call = service.stub.StreamJobChanges(request, metadata=who[name], timeout=10)
        try:
            return await call.read()  # type: ignore[no-any-return]
        finally:
            call.cancel()

    assert (await first_answer(got[first], "alice")).job.id == second
    assert (await first_answer(plain[first], "alice")).job.id == second
    for name in ("bob", "operator"):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await first_answer(got[first], name)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert set(rich_error(caught.value).field_violations) == {"after_cursor"}


async def test_a_quiet_submitters_cursor_keeps_up_with_retention(
    start_service: StartService,
) -> None:
    """alice makes no change while bob's are pruned: her marks follow what retention
    deleted (no secret: a refusal names the oldest cursor), so the cursor her inbox
    stores does not expire on reconnect. Marks at her own changes only, as above,
    left it behind the pruned changes: CURSOR_EXPIRED, and her inbox stopped."""
    service = await start_service(auth="token", workers=1, retain_changes="1s")
    service.gateway.script = lambda _job, _attempt: Hang()
    feed = service.runtime.change_feed
    feed.mark_interval = 0.05
    who = {
        name: bearer(await add_token(service, name, role))
        for name, role in (("alice", Role.SUBMITTER), ("bob", Role.SUBMITTER))
    }
    who["operator"] = bearer(await add_token(service, "operator", Role.OPERATOR))
    stream = asyncio.ensure_future(_messages(service, who["alice"], 4.0))
    await asyncio.sleep(0.3)
    for _ in range(3):
        await _cancelled(service, who, "bob")
    await asyncio.sleep(1.2)
    assert await feed.prune() >= 3
    await _cancelled(service, who, "bob")  # the feed's state moves on, pruned_through too
    messages = await stream
    assert not [m for m in messages if m.HasField("job")]
    assert messages, "a mark past the pruned changes"
    request = pb.StreamJobChangesRequest(after_cursor=messages[-1].cursor)
    call = service.stub.StreamJobChanges(request, metadata=who["alice"], timeout=10)
    try:
        with pytest.raises(TimeoutError):  # resumed: nothing of hers to send, no refusal
            await asyncio.wait_for(call.read(), 0.5)
    finally:
        call.cancel()
