"""Dependencies (EnqueueRequest.depends_on) over real gRPC, on SQLite and PostgreSQL:
a job waits (Job.waiting_for names what it waits on) until every dependency is
COMPLETED, then runs with their results as its input (a TIL takes its cards'
summaries in completion order, a recall the TIL and a card); a FAILED dependency
cancels its dependents, and theirs, naming it, and RetryFailed does not revive them;
bad depends_on values are refused naming depends_on[i], another caller's job as an
unknown one; retention keeps a finished job while an active one depends on it."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from san_jobs.job_service.domain.model import JobStatus
from san_jobs.job_service.domain.ports import PruneBatchParams
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Fail, Held
from tests.support.jobs_api import card_request, wait_terminal
from tests.support.rich_errors import rich_error, status_error

DAY = "2026-12-04"


def til_request(
    target_id: str, depends_on: list[str], notes: tuple[str, ...] = ()
) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_TIL_GENERATION,
        target_id=target_id,
        til_generation_input=pb.TilGenerationInput(day=DAY, notes=list(notes)),
        depends_on=depends_on,
    )


def recall_request(target_id: str, depends_on: list[str]) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_RECALL_GENERATION,
        target_id=target_id,
        recall_generation_input=pb.RecallGenerationInput(question_count=2),
        depends_on=depends_on,
    )


async def get(service: Service, job_id: str) -> pb.Job:
    return (await service.stub.GetJob(pb.GetJobRequest(job_id=job_id))).job


async def wait_status(service: Service, job_id: str, status: int, within: float = 10.0) -> pb.Job:
    deadline = time.monotonic() + within
    while True:
        job = await get(service, job_id)
        if job.status == status:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} is {pb.JobStatus.Name(job.status)}")
        await asyncio.sleep(0.02)


class Holds:
    """Every gateway call waits until the test releases its job (`release`, also
    before the call arrives): a job's call cannot answer before the test has its id
    in hand, however fast the worker claims it."""

    def __init__(self, service: Service) -> None:
        self.held: dict[str, Held] = {}
        service.gateway.script = lambda job_id, _attempt: self[job_id]

    def __getitem__(self, job_id: str) -> Held:
        return self.held.setdefault(job_id, Held())

    def release(self, *job_ids: str) -> None:
        for job_id in job_ids:
            self[job_id].release()


async def test_a_til_waits_for_its_cards_then_takes_their_summaries_as_completed(
    start_service: StartService,
) -> None:
    service = await start_service()
    held = Holds(service)
    cards = []
    for name, text in (("a", "Alpha leads. More."), ("b", "Beta follows. More.")):
        card = (await service.stub.Enqueue(card_request(name, text, request_id=name))).job
        cards.append(card.id)
    first, second = cards
    await held[first].reached.wait()
    await held[second].reached.wait()

    til = (await service.stub.Enqueue(til_request("day", cards))).job
    held.release(til.id)  # its call answers when it comes
    assert til.status == pb.JOB_STATUS_PENDING
    assert list(til.depends_on) == cards
    assert til.waiting_for.reason == pb.PAUSE_REASON_DEPENDENCIES
    assert list(til.waiting_for.job_ids) == cards
    assert not til.HasField("next_attempt_time")  # not a time: it waits for jobs

    held[second].release()  # the second card completes first
    await wait_status(service, second, pb.JOB_STATUS_COMPLETED)
    waiting = await get(service, til.id)
    assert waiting.status == pb.JOB_STATUS_PENDING and not waiting.attempts
    assert list(waiting.waiting_for.job_ids) == [first]
    request = pb.ListJobsRequest(job_types=[pb.JOB_TYPE_TIL_GENERATION])
    listed = (await service.stub.ListJobs(request)).jobs
    assert list(listed[0].waiting_for.job_ids) == [first]

    held[first].release()
    done = (await wait_terminal(service.stub, [til.id], timeout=20))[til.id]
    assert done.status == pb.JOB_STATUS_COMPLETED, done.error_message
    stored = await get(service, til.id)
    # Its input is the merged one (what the gateway got, and what a retry would send).
    assert list(stored.til_generation_input.notes) == ["Beta follows.", "Alpha leads."]
    assert stored.til_generation_result.body == "- Beta follows.\n- Alpha leads."
    assert not stored.HasField("waiting_for")
    # Due in the statement that completed the last card: it started after that.
    first_done = (await get(service, first)).complete_time.ToDatetime()
    assert stored.attempts[0].start_time.ToDatetime() >= first_done

    recall = (await service.stub.Enqueue(recall_request("quiz", [til.id, first]))).job
    held.release(recall.id)
    assert not recall.HasField("waiting_for")  # both COMPLETED already: due at once
    answered = (await wait_terminal(service.stub, [recall.id], timeout=20))[recall.id]
    assert answered.status == pb.JOB_STATUS_COMPLETED, answered.error_message
    sources = (await get(service, recall.id)).recall_generation_input.sources
    # In completion order: the first card completed before the TIL.
    assert [(s.job_id, s.text) for s in sources] == [
        (first, "Alpha leads."),
        (til.id, "- Beta follows.\n- Alpha leads."),
    ]
    assert sources[1].title == f"TIL {DAY}"
    assert len(answered.recall_generation_result.questions) == 2


async def test_a_failed_dependency_cancels_its_dependents_naming_it(
    start_service: StartService,
) -> None:
    service = await start_service(max_attempts=1)
    held = Holds(service)
    card = (await service.stub.Enqueue(card_request("doomed", "Doomed. Text."))).job
    await held[card.id].reached.wait()
    til = (await service.stub.Enqueue(til_request("day", [card.id]))).job
    recall = (await service.stub.Enqueue(recall_request("quiz", [til.id]))).job
    other = (
        await service.stub.Enqueue(card_request("after", "After. Text.", depends_on=[til.id]))
    ).job
    held[card.id].fail = Fail(grpc.StatusCode.INVALID_ARGUMENT, "the provider refused the text")
    held.release(card.id)
    ended = await wait_terminal(service.stub, [card.id, til.id, recall.id, other.id], timeout=20)
    assert ended[card.id].status == pb.JOB_STATUS_FAILED
    assert ended[til.id].status == pb.JOB_STATUS_CANCELLED
    assert ended[til.id].error_message == f"Dependency {card.id} FAILED"
    assert ended[til.id].error_reason == "DEPENDENCY_ENDED"
    # Its own dependents end with it, each naming the job it waited for.
    for dependent in (recall.id, other.id):
        assert ended[dependent].status == pb.JOB_STATUS_CANCELLED
        assert ended[dependent].error_message == f"Dependency {til.id} CANCELLED"
    assert service.gateway.calls[til.id] == 0 and service.gateway.calls[recall.id] == 0

    # A job enqueued after its dependency failed ends at once, in Enqueue's answer.
    late = (await service.stub.Enqueue(til_request("late", [card.id]))).job
    assert late.status == pb.JOB_STATUS_CANCELLED
    assert late.error_message == f"Dependency {card.id} FAILED"

    # RetryFailed heals the card, not its dependents: the application enqueues again.
    held.held[card.id] = Held()  # its next call answers
    held.release(card.id)
    retried = await service.stub.RetryFailed(pb.RetryFailedRequest(job_ids=[card.id]))
    assert list(retried.job_ids) == [card.id]
    await wait_status(service, card.id, pb.JOB_STATUS_COMPLETED)
    await asyncio.sleep(0.3)
    assert (await get(service, til.id)).status == pb.JOB_STATUS_CANCELLED
    again = (await service.stub.Enqueue(til_request("day", [card.id]))).job
    held.release(again.id)
    healed = (await wait_terminal(service.stub, [again.id], timeout=20))[again.id]
    assert healed.status == pb.JOB_STATUS_COMPLETED
    assert (await get(service, again.id)).til_generation_input.notes == ["Doomed."]


async def test_a_cancelled_dependency_cancels_its_dependent(service: Service) -> None:
    held = Holds(service)
    card = (await service.stub.Enqueue(card_request("c", "Cancel me. Text."))).job
    await held[card.id].reached.wait()
    til = (await service.stub.Enqueue(til_request("day", [card.id]))).job
    await service.stub.CancelJob(pb.CancelJobRequest(job_id=card.id, reason="not needed"))
    ended = (await wait_terminal(service.stub, [til.id], timeout=10))[til.id]
    assert ended.status == pb.JOB_STATUS_CANCELLED
    assert ended.error_message == f"Dependency {card.id} CANCELLED"
    held[card.id].release()


async def test_depends_on_is_checked_naming_the_field(service: Service) -> None:
    held = Holds(service)
    embedding = (
        await service.stub.Enqueue(
            pb.EnqueueRequest(
                job_type=pb.JOB_TYPE_EMBEDDING,
                target_id="e",
                embedding_input=pb.EmbeddingInput(text="Some text."),
            )
        )
    ).job
    card = (await service.stub.Enqueue(card_request("k", "Card. Text."))).job
    unknown = "00000000-0000-4000-8000-000000000000"

    async def violations(request: pb.EnqueueRequest) -> dict[str, str]:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await service.stub.Enqueue(request)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        return rich_error(caught.value).field_violations

    assert set(await violations(til_request("t", [card.id, unknown]))) == {"depends_on[1]"}
    assert set(await violations(til_request("t", ["not-a-uuid"]))) == {"depends_on[0]"}
    assert set(await violations(til_request("t", [card.id, card.id.upper()]))) == {"depends_on[1]"}
    assert set(await violations(til_request("t", [unknown] * 101))) == {"depends_on"}
    wrong = await violations(til_request("t", [embedding.id]))
    assert set(wrong) == {"depends_on[0]"} and "EMBEDDING" in wrong["depends_on[0]"]
    # Without dependencies a TIL still needs notes, a recall sources.
    assert set(await violations(til_request("t", []))) == {"til_generation_input.notes"}
    assert set(await violations(recall_request("r", []))) == {"recall_generation_input.sources"}
    # job_id of a source is JobService's to set.
    own = recall_request("r", [card.id])
    own.recall_generation_input.sources.add(title="t", text="x", job_id=card.id)
    assert set(await violations(own)) == {"recall_generation_input.sources[0].job_id"}
    # Nothing was stored by the refused requests.
    listed = (await service.stub.ListJobs(pb.ListJobsRequest(page_size=50))).jobs
    assert {j.id for j in listed} == {embedding.id, card.id}

    # BatchEnqueue names the item too; the other items are stored.
    answer = await service.stub.BatchEnqueue(
        pb.BatchEnqueueRequest(
            requests=[til_request("ok", [card.id]), til_request("bad", [unknown])]
        )
    )
    assert answer.results[0].response.job.waiting_for.reason == pb.PAUSE_REASON_DEPENDENCIES
    error = status_error(answer.results[1].error)
    assert set(error.field_violations) == {"requests[1].depends_on[0]"}
    ok = answer.results[0].response.job.id
    held.release(card.id, ok)
    done = await wait_terminal(service.stub, [ok], timeout=20)
    assert done[ok].status == pb.JOB_STATUS_COMPLETED


async def test_a_repeated_request_id_returns_the_stored_dependent(service: Service) -> None:
    held = Holds(service)
    card = (await service.stub.Enqueue(card_request("k", "Card. Text."))).job
    request = til_request("t", [card.id])
    request.request_id = "til:me:2026-12-04"
    first = (await service.stub.Enqueue(request)).job
    again = await service.stub.Enqueue(request)
    assert again.job.id == first.id and again.deduplicated
    held[card.id].release()


async def test_retention_keeps_a_finished_job_an_active_one_depends_on(
    start_service: StartService,
) -> None:
    service = await start_service()
    held = Holds(service)
    done = (await service.stub.Enqueue(card_request("done", "Done. Text."))).job
    held.release(done.id)
    running = (await service.stub.Enqueue(card_request("running", "Running. Text."))).job
    await wait_status(service, done.id, pb.JOB_STATUS_COMPLETED)
    await held[running.id].reached.wait()
    lone = (await service.stub.Enqueue(card_request("lone", "Lone. Text."))).job
    held.release(lone.id)
    await wait_status(service, lone.id, pb.JOB_STATUS_COMPLETED)
    til = (await service.stub.Enqueue(til_request("day", [done.id, running.id]))).job
    held.release(til.id)

    # Every COMPLETED job so far is past a cutoff of now: only `lone` may go.
    store = service.runtime.store
    cutoff = datetime.now(UTC) + timedelta(seconds=1)
    params = PruneBatchParams(status=JobStatus.COMPLETED, cutoff=cutoff, limit=100)
    assert await store.retention.prune_batch(params) == 1
    with pytest.raises(grpc.aio.AioRpcError):
        await get(service, lone.id)
    assert (await get(service, done.id)).status == pb.JOB_STATUS_COMPLETED

    held[running.id].release()
    finished = (await wait_terminal(service.stub, [til.id], timeout=20))[til.id]
    assert finished.status == pb.JOB_STATUS_COMPLETED
    assert list((await get(service, til.id)).til_generation_input.notes) == [
        "Done.",
        "Running.",
    ]


async def test_another_callers_job_reads_as_an_unknown_one(start_service: StartService) -> None:
    from san_jobs.job_service.auth.roles import Role
    from tests.integration.job_service.test_auth_roles import add_token, bearer

    service = await start_service(auth="token")
    alice = bearer(await add_token(service, "alice", Role.SUBMITTER))
    bob = bearer(await add_token(service, "bob", Role.SUBMITTER))
    theirs = (await service.stub.Enqueue(card_request("a", "Alice's. Text."), metadata=alice)).job
    unknown = "00000000-0000-4000-8000-000000000000"
    answers = []
    for dependency in (theirs.id, unknown):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await service.stub.Enqueue(til_request("day", [dependency]), metadata=bob)
        error = rich_error(caught.value)
        answers.append(
            (error.code, error.field_violations["depends_on[0]"].replace(dependency, ""))
        )
    assert answers[0] == answers[1]  # the same words: bob learns nothing of alice's job
    mine = await service.stub.Enqueue(til_request("day", [theirs.id]), metadata=alice)
    assert list(mine.job.depends_on) == [theirs.id]


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_forty_cards_completed_by_two_instances_make_one_til(
    start_service: StartService,
) -> None:
    """Two instances on one PostgreSQL complete the 40 cards at once (each decrement
    of the TIL's count under the row's lock): the TIL runs exactly once, with all 40
    summaries, as soon as the last one completes (2 s: two services and 41 jobs)."""
    first = await start_service(workers=8)
    second = await start_service(workers=8)
    release = asyncio.Event()  # every call waits for it (the two share one gateway)
    first.gateway.script = lambda _job, _attempt: Held(released=release)
    cards = []
    for index in range(40):
        card = (await first.stub.Enqueue(card_request(f"c{index}", f"Card {index}. Text."))).job
        cards.append(card.id)
    til = (await second.stub.Enqueue(til_request("day", cards))).job
    release.set()
    done = (await wait_terminal(first.stub, [til.id], timeout=30))[til.id]
    assert done.status == pb.JOB_STATUS_COMPLETED, done.error_message
    assert first.gateway.calls[til.id] == 1
    notes = list((await get(first, til.id)).til_generation_input.notes)
    assert sorted(notes) == sorted(f"Card {index}." for index in range(40))
