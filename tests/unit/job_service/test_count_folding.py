"""The count folder folds every interval, outlives a storage failure, and stops."""

from __future__ import annotations

import asyncio
import logging

import pytest

from san_jobs.job_service.count_folding import CountFolder
from san_jobs.job_service.domain.errors import StorageUnavailableError
from san_jobs.job_service.storage.memory_queries import MemoryJobQueries


class FoldingStore(MemoryJobQueries):
    def __init__(self, failures: int) -> None:
        super().__init__()
        self.folds = 0
        self.failures = failures
        self.folded = asyncio.Event()

    async def fold_counts(self) -> int:
        self.folds += 1
        if self.failures:
            self.failures -= 1
            raise StorageUnavailableError("database down")
        if self.folds >= 3:
            self.folded.set()
        return 7


async def test_folds_again_after_a_failure_then_stops(caplog: pytest.LogCaptureFixture) -> None:
    store = FoldingStore(failures=1)
    folder = CountFolder(store, interval=0.001)
    with caplog.at_level(logging.WARNING):
        folder.start()
        await asyncio.wait_for(store.folded.wait(), 5)
        await folder.stop()
    assert "folding the job counts failed: database down" in caplog.text
    stopped_at = store.folds
    await asyncio.sleep(0.01)
    assert store.folds == stopped_at  # no fold after stop
    assert await folder.fold_once() == 7
    await folder.stop()  # a second stop is harmless
