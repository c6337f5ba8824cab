"""Issue 25's goal for schedules, with real processes: a 1 s interval schedule on
three job-service instances sharing one PostgreSQL database, one killed -9 in the
middle: one job per period, no period doubled, none missed between the first and
the last (tests/support/schedule_ha.py).

The goal says 30 s; this runs 9 s (about 12 s with the processes' start), enough
periods on both sides of the kill, because the suite is over its time budget. The
full 30 s run, with its figures, is bench/bench_schedules.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.schedule_ha import run_ha

pytestmark = pytest.mark.acceptance


@pytest.mark.postgres
@pytest.mark.timeout(120)
async def test_one_job_per_period_across_three_instances_one_killed(
    tmp_path: Path, postgres_database: str
) -> None:
    run = await run_ha(tmp_path, postgres_database, seconds=9)
    assert len(run.periods) >= 7, run
    assert max(run.per_period.values()) == 1  # no period doubled
    assert run.missing == []  # none missed between the first and the last
    assert run.skipped_count == 0
    # The survivors went on after the kill; each line names the job it enqueued.
    assert sum(run.fired_by.values()) == len(run.periods)
    assert set(run.fired_by) - {run.killed}
