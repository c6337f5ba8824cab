"""GroupCommit timing: a lone item goes at once; under load flushes are spaced by
min_interval and each carries what arrived meanwhile."""

from __future__ import annotations

import asyncio

from san_jobs.job_service.storage.batching import GroupCommit


class Recorder:
    def __init__(self) -> None:
        self.flushes: list[tuple[float, list[int]]] = []

    async def flush(self, items: list[int]) -> list[int]:
        self.flushes.append((asyncio.get_running_loop().time(), list(items)))
        await asyncio.sleep(0.01)  # the statement
        return [item * 10 for item in items]


async def test_flushes_are_spaced_and_carry_what_arrived_meanwhile() -> None:
    rec = Recorder()
    coalescer: GroupCommit[int, int] = GroupCommit(
        rec.flush, max_batch=100, name="t", min_interval=0.3
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await coalescer.submit(1) == 10  # the first flush is done; these arrive after it
    later = [asyncio.ensure_future(coalescer.submit(n)) for n in (2, 3, 4)]
    assert await asyncio.gather(*later) == [20, 30, 40]
    (t1, batch1), (t2, batch2) = rec.flushes
    assert batch1 == [1] and t1 - started < 0.2, "a lone item after a quiet spell goes at once"
    assert batch2 == [2, 3, 4], "the items that came meanwhile share the next statement"
    assert t2 - t1 >= 0.29, "not before min_interval after the previous flush started"


async def test_without_min_interval_the_next_flush_follows_at_once() -> None:
    rec = Recorder()
    coalescer: GroupCommit[int, int] = GroupCommit(rec.flush, max_batch=100, name="t")
    await coalescer.submit(1)
    await coalescer.submit(2)
    (t1, _), (t2, _) = rec.flushes
    assert t2 - t1 < 0.2
