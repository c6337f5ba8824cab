"""Natural batching ("group commit") of concurrent calls into one statement.

A `GroupCommit` collects the items of concurrent callers. When nothing is being written,
the first item starts a flush at once (no timer: a lone caller waits for nothing but
its own statement). Items that arrive while a flush runs wait for it and go together
into the next one. Each caller's future resolves only after the statement that wrote
its item has committed, with that item's own result (or exception).

One flush runs at a time per coalescer, so the batch grows with the load: under light
load a batch is one item, under heavy load it is everything that arrived during the
previous statement (at most `max_batch`). With `min_interval`, a flush also starts no
sooner than that long after the previous one started: under load each statement
then carries what arrived in that time (fewer, fuller statements; each costs the
database and this process far more than a row does), while a lone item after a quiet
spell still goes at once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

from san_jobs.job_service.domain.errors import StorageError, StorageUnavailableError

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")

# One flush's result per item: a value for the caller, or an exception to raise in it.
Flush = Callable[[list[ItemT]], Awaitable[Sequence[ResultT | BaseException]]]


# Rows per group-commit statement (enqueue, complete, fail, renew).
MAX_BATCH = 500


def refused_for_its_data(error: StorageError) -> bool:
    """A statement refused for the data of some row (a CHECK, a too-long value, as
    classified by storage/errors.py): in a batch, each row is then written alone so
    only its own caller hears of it. Not for connection trouble: a batch that may
    have committed is never written again."""
    return not isinstance(error, StorageUnavailableError)


class GroupCommit(Generic[ItemT, ResultT]):
    """Runs `flush(items)` for batches of submitted items, one batch at a time.

    `flush` returns one result per item, in order; an exception instance is raised in
    that item's caller only. If `flush` itself raises, every caller of the batch gets
    that exception. With `key`, two items of one key never share a batch (the later
    one waits for the next), so a statement never sees the same row twice."""

    def __init__(
        self,
        flush: Flush[ItemT, ResultT],
        *,
        max_batch: int,
        name: str,
        key: Callable[[ItemT], Hashable] | None = None,
        min_interval: float = 0.0,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._flush = flush
        self._min_interval = min_interval
        self._last_start = float("-inf")  # loop time the last flush started
        self._max_batch = max_batch
        self._name = name
        self._key = key
        self._pending: deque[tuple[ItemT, asyncio.Future[ResultT]]] = deque()
        self._task: asyncio.Task[None] | None = None

    async def submit(self, item: ItemT) -> ResultT:
        """Queue `item` and wait until the statement that carries it has committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ResultT] = loop.create_future()
        self._pending.append((item, future))
        task = self._task
        if task is None or task.get_loop() is not loop:
            self._task = loop.create_task(self._drain(), name=f"coalesce-{self._name}")
        return await future

    async def wait_idle(self) -> None:
        """Wait for the running flushes (if any) to finish."""
        task = self._task
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            await asyncio.shield(task)

    def _take(self) -> list[tuple[ItemT, asyncio.Future[ResultT]]]:
        batch: list[tuple[ItemT, asyncio.Future[ResultT]]] = []
        later: list[tuple[ItemT, asyncio.Future[ResultT]]] = []
        keys: set[Hashable] = set()
        while self._pending and len(batch) < self._max_batch:
            entry = self._pending.popleft()
            if entry[1].done():
                continue  # its caller gave up before its turn: nothing was written
            if self._key is not None:
                key = self._key(entry[0])
                if key in keys:
                    later.append(entry)
                    continue
                keys.add(key)
            batch.append(entry)
        self._pending.extendleft(reversed(later))
        return batch

    async def _drain(self) -> None:
        batch: list[tuple[ItemT, asyncio.Future[ResultT]]] = []
        loop = asyncio.get_running_loop()
        try:
            while True:
                wait = self._last_start + self._min_interval - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                batch = self._take()
                if not batch:
                    return
                self._last_start = loop.time()
                try:
                    results = await self._flush([item for item, _ in batch])
                except Exception as error:  # every caller of this batch hears of it
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                if len(results) != len(batch):  # pragma: no cover - a bug in a flush
                    raise RuntimeError(f"{self._name}: flush gave {len(results)} results")
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
                batch = []
        finally:
            # Only reached with items left when the drain itself was cancelled or
            # broke: no caller may wait for ever.
            for _, future in [*batch, *self._pending]:
                if not future.done():
                    future.cancel()
            self._pending.clear()
            self._task = None
