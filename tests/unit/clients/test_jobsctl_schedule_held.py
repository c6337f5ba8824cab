"""jobsctl shows why JobService holds a schedule (Schedule.paused_reason, issue 42
point 6: its owner's token was revoked or expired), not a bare "paused"."""

from __future__ import annotations

from rich.console import Console

from san_jobs.jobsctl._schedules import schedule_detail, schedules_table
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

REASON = "its owner's token 'alice' was revoked at 2026-12-07T03:00:00Z"


def rendered(draw: object, value: object) -> str:
    console = Console(width=200, record=True, color_system=None)
    draw(console, value)  # type: ignore[operator]
    return console.export_text()


def test_a_held_schedule_says_why() -> None:
    held = pb.Schedule(schedule_id="tick", cron="* * * * *", paused=True, paused_reason=REASON)
    assert f"paused: yes: {REASON}" in rendered(schedule_detail, held)
    assert "held" in rendered(schedules_table, [held])
    mine = pb.Schedule(schedule_id="tock", cron="* * * * *", paused=True)
    assert "paused: yes\n" in rendered(schedule_detail, mine)
    assert "held" not in rendered(schedules_table, [mine])
