"""worker.CallSlots: the gateway slots jobs claimed ahead wait for."""

from __future__ import annotations

import asyncio

from san_jobs.job_service.worker import CallSlots


async def test_waiters_get_slots_in_turn_urgent_first() -> None:
    slots = CallSlots(1)
    assert slots.take_now()
    assert not slots.take_now()
    order: list[str] = []

    async def wait(name: str, urgent: bool) -> None:
        await slots.take(urgent)
        order.append(name)

    tasks = [asyncio.create_task(wait(n, u)) for n, u in (("a", False), ("b", False), ("p", True))]
    await asyncio.sleep(0)
    for _ in range(3):
        slots.release()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == ["p", "a", "b"]
    slots.release()
    assert slots.take_now()  # the last slot given back is free again


async def test_a_cancelled_waiter_passes_on_a_slot_it_was_handed() -> None:
    slots = CallSlots(1)
    assert slots.take_now()
    first = asyncio.create_task(slots.take())
    second = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    slots.release()  # handed to `first`...
    first.cancel()  # ...cancelled before it ran: the slot goes on to `second`
    await asyncio.gather(first, return_exceptions=True)
    await asyncio.wait_for(second, 1)
    assert not slots.take_now()


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    slots = CallSlots(1)
    assert slots.take_now()
    gone = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    slots.release()
    assert slots.take_now()  # nobody waits: the slot is free
