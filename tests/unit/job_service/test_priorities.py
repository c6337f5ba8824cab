"""Priorities: Enqueue's range check (the field named, in a batch item too), the share
rule (domain/priorities.py) and the worker's local order of jobs claimed ahead."""

from __future__ import annotations

import asyncio

import pytest
from google.rpc import error_details_pb2

from san_jobs.job_service.domain.errors import InvalidRequestError
from san_jobs.job_service.domain.priorities import AGE_SHARE, AgeShare
from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.transport import batch, requests
from san_jobs.job_service.worker import CallSlots
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

LIMITS = EnqueueLimits(max_text_chars=100)


def card(priority: int, target_id: str = "scrap-1") -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id=target_id,
        card_analysis_input=pb.CardAnalysisInput(text="Some text."),
        priority=priority,
    )


@pytest.mark.parametrize(("given", "stored"), [(0, 3), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5)])
def test_priorities_0_to_5_are_accepted_0_meaning_3(given: int, stored: int) -> None:
    new = requests.enqueue(card(priority=given), LIMITS, 3).job
    assert new.priority == stored


@pytest.mark.parametrize("given", [-1, 6, 2**31 - 1, -(2**31)])
def test_a_priority_outside_0_to_5_is_rejected_naming_the_field(given: int) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        requests.enqueue(card(priority=given), LIMITS, 3)
    (violation,) = caught.value.violations
    assert violation.field == "priority"
    assert str(given) in violation.description


def test_a_batch_item_names_requests_i_priority() -> None:
    request = pb.BatchEnqueueRequest(
        requests=[card(target_id="a", priority=1), card(target_id="b", priority=6)]
    )
    decoded = batch.decode(
        request,
        LIMITS,
        3,
        requested_by=None,
        traceparent=None,
        answer_budget_bytes=1 << 20,
    )
    assert [item.job.priority for item in decoded.items] == [1]
    status = decoded.errors[1]
    bad = error_details_pb2.BadRequest()
    assert any(detail.Unpack(bad) for detail in status.details)
    assert [v.field for v in bad.field_violations] == ["requests[1].priority"]


def test_the_share_takes_one_claim_by_age_when_age_falls_below_a_tenth() -> None:
    share = AgeShare()
    orders = []
    for _ in range(31):
        by_age = share.next_by_age()
        orders.append(by_age)
        share.took(1, by_age)
    # Claim 1 by priority (nothing owed yet), then claims 2, 12, 22 by age.
    assert [n for n, by_age in enumerate(orders, start=1) if by_age] == [2, 12, 22]
    assert share.by_age * AGE_SHARE >= share.claimed - AGE_SHARE


def test_a_claim_that_took_nothing_changes_nothing() -> None:
    share = AgeShare()
    share.took(0, False)
    assert not share.next_by_age()
    share.took(5, False)
    assert share.next_by_age()
    share.took(0, True)  # nothing was due: still owed
    assert share.next_by_age()


async def test_call_slots_go_to_the_most_urgent_claimed_ahead_job() -> None:
    """A priority-1 job claimed after ten priority-5 jobs waiting for a slot gets the
    next slot (it waited behind all ten before priorities)."""
    slots = CallSlots(1)
    assert slots.take_now()
    order: list[str] = []

    async def wait(name: str, priority: int) -> None:
        await slots.take(priority=priority)
        order.append(name)

    tasks = [asyncio.create_task(wait(f"low-{i}", 5)) for i in range(10)]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(wait("urgent", 1)))
    await asyncio.sleep(0)
    slots.release()
    await asyncio.sleep(0)
    assert order == ["urgent"]
    for _ in range(10):
        slots.release()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order[1:] == [f"low-{i}" for i in range(10)]


async def test_call_slots_give_one_in_ten_to_the_longest_waiting() -> None:
    """A stream of priority-1 jobs claimed ahead never keeps a priority-5 one waiting
    for ever: it gets the second slot handed out (then one in ten)."""
    slots = CallSlots(1)
    assert slots.take_now()
    order: list[str] = []

    async def wait(name: str, priority: int) -> None:
        await slots.take(priority=priority)
        order.append(name)

    tasks = [asyncio.create_task(wait("low", 5))]
    for i in range(12):
        tasks.append(asyncio.create_task(wait(f"urgent-{i}", 1)))
    await asyncio.sleep(0)
    for _ in range(13):
        slots.release()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order.index("low") == 1
