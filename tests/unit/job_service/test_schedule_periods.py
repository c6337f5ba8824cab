"""Schedule periods (domain/schedules.py) on a virtual clock: cron in UTC and in
Europe/Paris across both 2026 daylight-saving changes, intervals, the plan of a
firing round, validation, and the request_id of a period's job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from san_jobs.job_service.domain.errors import FieldViolation
from san_jobs.job_service.domain.model import JobType, OnDuplicate
from san_jobs.job_service.domain.schedules import (
    MAX_COUNTED_PERIODS,
    ScheduleDefinition,
    ScheduleTemplate,
    anchor_of,
    check_cron,
    check_interval,
    check_schedule_id,
    next_period,
    period_request_id,
    plan_fire,
    time_zone,
)

TEMPLATE = ScheduleTemplate(JobType.CARD_ANALYSIS, "t", {"text": "x"}, 3, 3, OnDuplicate.REJECT)


def cron(expression: str, zone: str = "") -> ScheduleDefinition:
    return ScheduleDefinition(template=TEMPLATE, cron=expression, time_zone=zone)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc, arg-type]


def periods(definition: ScheduleDefinition, after: datetime, count: int) -> list[datetime]:
    found, moment = [], after
    for _ in range(count):
        moment = next_period(definition, anchor_of(after), moment)
        found.append(moment)
    return found


def test_cron_in_utc() -> None:
    assert periods(cron("0 21 * * *"), utc(2026, 12, 4, 20, 0), 2) == [
        utc(2026, 12, 4, 21, 0),
        utc(2026, 12, 5, 21, 0),
    ]
    # Strictly after: a period starting exactly at `after` is not the next one.
    assert next_period(cron("0 21 * * *"), utc(2026, 1, 1), utc(2026, 12, 4, 21)) == utc(
        2026, 12, 5, 21
    )


def test_paris_0230_fires_once_at_the_jump_in_march() -> None:
    # 2026-03-29: at 02:00 CET the clock jumps to 03:00 CEST; 02:30 never happens.
    days = periods(cron("30 2 * * *", "Europe/Paris"), utc(2026, 3, 27, 12), 4)
    assert days == [
        utc(2026, 3, 28, 1, 30),  # 02:30 CET
        utc(2026, 3, 29, 1, 0),  # the jump: 03:00 CEST, once
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
        utc(2026, 3, 31, 0, 30),
    ]


def test_paris_0230_fires_once_the_first_time_in_october() -> None:
    # 2026-10-25: at 03:00 CEST the clock goes back to 02:00 CET; 02:30 happens twice.
    days = periods(cron("30 2 * * *", "Europe/Paris"), utc(2026, 10, 23, 12), 4)
    assert days == [
        utc(2026, 10, 24, 0, 30),  # 02:30 CEST
        utc(2026, 10, 25, 0, 30),  # the first 02:30 (CEST); not the second (01:30 UTC)
        utc(2026, 10, 26, 1, 30),  # 02:30 CET
        utc(2026, 10, 27, 1, 30),
    ]


def test_new_york_0130_from_the_second_pass_of_the_repeated_hour() -> None:
    # Issue 42, point 11: 2026-11-01, at 02:00 EDT the clock goes back to 01:00 EST.
    # After 06:10 UTC (01:10 EST, the second pass) the next period was 05:30 UTC
    # (01:30 EDT), before `after`: a schedule created or resumed then fired at once.
    daily = cron("30 1 * * *", "America/New_York")
    after = utc(2026, 11, 1, 6, 10)
    assert next_period(daily, anchor_of(after), after) == utc(2026, 11, 2, 6, 30)
    assert periods(daily, utc(2026, 10, 31, 12), 3) == [
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT, the first pass: once
        utc(2026, 11, 2, 6, 30),  # 01:30 EST
        utc(2026, 11, 3, 6, 30),
    ]
    # An hourly cron fires in both passes; from the second, the next is after it.
    hourly = cron("30 * * * *", "America/New_York")
    assert next_period(hourly, anchor_of(after), after) == utc(2026, 11, 1, 6, 30)
    # A round missed that morning: the latest period before 06:20 UTC is 05:30.
    plan = plan_fire(daily, anchor_of(after), utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 6, 20))
    assert (plan.skipped, plan.fire, plan.next_fire_at) == (
        1,
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 2, 6, 30),
    )


def test_interval_periods_start_at_the_creation_second_plus_k_intervals() -> None:
    every = ScheduleDefinition(template=TEMPLATE, interval=timedelta(seconds=10))
    anchor = anchor_of(utc(2026, 12, 4, 21, 0, 3) + timedelta(microseconds=500))
    assert anchor == utc(2026, 12, 4, 21, 0, 3)
    assert next_period(every, anchor, anchor) == utc(2026, 12, 4, 21, 0, 13)
    assert next_period(every, anchor, utc(2026, 12, 4, 21, 0, 13)) == utc(2026, 12, 4, 21, 0, 23)
    assert next_period(every, anchor, utc(2026, 12, 4, 21, 5, 0)) == utc(2026, 12, 4, 21, 5, 3)


def test_plan_of_a_round_after_downtime() -> None:
    anchor = utc(2026, 12, 4, 0, 0)
    every_minute = ScheduleDefinition(template=TEMPLATE, interval=timedelta(minutes=1))
    due, now = utc(2026, 12, 4, 0, 1), utc(2026, 12, 4, 0, 10, 30)
    # No window: only the latest started period (00:10), the nine before skipped.
    plan = plan_fire(every_minute, anchor, due, now)
    assert (plan.skipped, plan.fire, plan.next_fire_at) == (
        9,
        utc(2026, 12, 4, 0, 10),
        utc(2026, 12, 4, 0, 11),
    )
    # A 3-minute window: the oldest period within it (00:08) fires first.
    windowed = ScheduleDefinition(
        template=TEMPLATE, interval=timedelta(minutes=1), catchup_window=timedelta(minutes=3)
    )
    plan = plan_fire(windowed, anchor, due, now)
    assert (plan.skipped, plan.fire, plan.next_fire_at) == (
        7,
        utc(2026, 12, 4, 0, 8),
        utc(2026, 12, 4, 0, 9),
    )
    # Due on time: fires it, skips nothing.
    plan = plan_fire(every_minute, anchor, due, due)
    assert (plan.skipped, plan.fire) == (0, due)
    # Cron alike: an hourly schedule down for five hours fires the latest hour.
    hourly = cron("0 * * * *")
    plan = plan_fire(hourly, anchor, utc(2026, 12, 4, 1), utc(2026, 12, 4, 5, 30))
    assert (plan.skipped, plan.fire, plan.next_fire_at) == (
        4,
        utc(2026, 12, 4, 5),
        utc(2026, 12, 4, 6),
    )


def test_request_id_of_a_period() -> None:
    moment = datetime(2026, 12, 4, 22, 0, tzinfo=UTC).astimezone(
        time_zone("time_zone", "Europe/Paris", [])
    )
    assert period_request_id("nightly", moment) == "schedule:nightly:2026-12-04T22:00:00Z"


def test_validation_names_the_field() -> None:
    out: list[FieldViolation] = []
    check_schedule_id("schedule.schedule_id", "", out)
    check_schedule_id("schedule.schedule_id", "bad id!", out)
    check_schedule_id("schedule.schedule_id", "x" * 129, out)
    check_schedule_id("schedule.schedule_id", "ok.id_1:2-3", out)
    check_cron("schedule.cron", "61 * * * *", out)
    check_cron("schedule.cron", "* * * *", out)
    assert check_cron("schedule.cron", "*/5 1-3 * jan mon", out)
    assert time_zone("schedule.time_zone", "Mars/Olympus", out) is None
    assert time_zone("schedule.time_zone", "../../etc/passwd", out) is None
    check_interval("schedule.interval", timedelta(milliseconds=500), out)
    check_interval("schedule.interval", timedelta(days=367), out)
    check_interval("schedule.interval", timedelta(seconds=1.5), out)
    check_interval("schedule.interval", timedelta(seconds=1), out)
    assert [v.field for v in out] == [
        "schedule.schedule_id",
        "schedule.schedule_id",
        "schedule.schedule_id",
        "schedule.cron",
        "schedule.cron",
        "schedule.time_zone",
        "schedule.time_zone",
        "schedule.interval",
        "schedule.interval",
        "schedule.interval",
    ]


def test_a_cron_that_never_matches_is_refused_naming_the_field() -> None:
    # Issue 42, point 10: these passed, then CreateSchedule answered INTERNAL
    # ("coroutine raised StopIteration") after cronsim's whole search.
    for never in ("0 0 */8 * MON#5", "0 0 */31 * 1L"):
        out: list[FieldViolation] = []
        assert not check_cron("schedule.cron", never, out)
        assert [(v.field, "never matches" in v.description) for v in out] == [
            ("schedule.cron", True)
        ]
    # Rare but real: Feb 29 (every 4 years), a Monday on the 1st or 29th of February.
    for rare in ("0 0 29 2 *", "0 0 */28 2 MON"):
        assert check_cron("schedule.cron", rare, [])


def test_a_very_long_outage_stops_counting_but_fires_the_latest_period() -> None:
    # A per-minute cron down for a year: the count stops at MAX_COUNTED_PERIODS, and
    # the round still fires the latest started minute, not the 100,000th one.
    every_minute = cron("* * * * *")
    due, now = utc(2026, 1, 1), utc(2026, 12, 4, 21, 0, 30)
    plan = plan_fire(every_minute, anchor_of(due), due, now)
    assert plan.skipped == MAX_COUNTED_PERIODS - 1
    assert (plan.fire, plan.next_fire_at) == (utc(2026, 12, 4, 21, 0), utc(2026, 12, 4, 21, 1))
