"""san-web's days in process (httpx over ASGI, JobService a FakeJobService, which runs
depends_on as JobService does): the API's answers to bad and early days, a day made on
request and its results brought home by the inbox, the 409 while it is made, a card
still running as the note's dependency, two users who never see each other's days, the
planner making an ended day once however many san-webs look, the time zone (PUT
/api/me, ``san-web users set-time-zone``) and the calendar itself. The real processes
on both databases are in tests/acceptance/clients/test_web_days_e2e.py."""

from __future__ import annotations

import asyncio
import time as clock
from collections.abc import AsyncIterator, Callable
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
import sqlalchemy as sa

from san_jobs.ai_gateway.model_tokens import estimate_tokens as gateway_estimate
from san_jobs.client import (
    RecallGenerationResult,
    RecallQuestion,
    TilGenerationResult,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.web._days import (
    CARDS_WAIT,
    INPUT_TOKENS,
    MAX_GENERATIONS,
    MAX_WAITING_CARDS,
    NOTE_TOKENS,
    Calendar,
    Days,
    DaySettings,
    condense,
    estimate_tokens,
    parse_til_at,
)
from san_jobs.web._store import ScrapStore, daily_notes, knowledge_cards, scraps
from san_jobs.web._users_cli import users_main
from tests.support.web_in_process import Web, web_app

# These tests move days themselves, and run a planner's pass when they mean to: the
# app's own planner is stopped at once (its one pass at start, late on a loaded
# machine, once made a day a test was about to make, which then answered 409).
QUIET = DaySettings(check_interval=3600)
PATIENCE = 10.0


@pytest.fixture
async def web(tmp_path: Path) -> AsyncIterator[Web]:
    async for made in web_app(tmp_path, "off", day_settings=QUIET):
        await made.app.state.days.stop()
        yield made


@pytest.fixture
async def web_login(tmp_path: Path) -> AsyncIterator[Web]:
    settings = DaySettings(check_interval=3600, shared_space=False)
    async for made in web_app(tmp_path, "password", day_settings=settings):
        await made.app.state.days.stop()
        yield made


def today() -> str:
    """The open day under the default settings (21:00 UTC)."""
    return Calendar(time(21, 0), ZoneInfo("UTC")).day_of(datetime.now(UTC)).isoformat()


async def eventually(check: Callable[[], Any], what: str) -> Any:
    """``check()``'s answer once it is truthy (an awaitable is awaited)."""
    deadline = clock.monotonic() + PATIENCE
    while True:
        answer = check()
        if asyncio.iscoroutine(answer):
            answer = await answer
        if answer:
            return answer
        assert clock.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)


async def day_of(http: httpx.AsyncClient, day: str) -> dict[str, Any]:
    answer = await http.get(f"/api/days/{day}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def carded(web: Web, http: httpx.AsyncClient, title: str, summary: str) -> str:
    scrap_id = await web.save(http, title)
    await web.complete(http, scrap_id, [1.0, 0.0], summary=summary)
    return scrap_id


def finish_day(web: Web, note_job: str, questions_job: str, questions: int) -> None:
    """JobService makes the note, then the questions (one per source, in order)."""
    web.service.complete(
        note_job, TilGenerationResult(title="Queues", body="Queues hold jobs.", model="m")
    )
    web.service.complete(
        questions_job,
        RecallGenerationResult(
            questions=[
                RecallQuestion(question=f"Q{i}?", answer=f"A{i}.", source_index=i)
                for i in range(questions)
            ],
            model="m",
        ),
    )


def _violations(answer: httpx.Response) -> list[str]:
    return [v["field"] for v in answer.json()["error"]["fieldViolations"]]


async def test_a_day_that_is_no_date_is_422_naming_day(web: Web) -> None:
    async with web.login("") as http:
        for bad in (
            "2026-13-01",
            "2026-02-30",
            "yesterday",
            "2026-1-01",
            "２０２６-01-01",
            "0001-01-01",  # its start is before the first date there is
            "9999-12-31",
        ):
            for answer in (
                await http.get(f"/api/days/{bad}"),
                await http.post(f"/api/days/{bad}/generate"),
            ):
                assert answer.status_code == 422, (bad, answer.text)
                assert answer.json()["error"]["code"] == "INVALID_ARGUMENT"
                assert _violations(answer) == ["day"]
        assert web.service.jobs == []


async def test_a_day_not_begun_is_422_and_one_without_scraps_404(web: Web) -> None:
    async with web.login("") as http:
        await web.save(http, "Queues")
        tomorrow = (date.fromisoformat(today()) + timedelta(days=1)).isoformat()
        early = await http.post(f"/api/days/{tomorrow}/generate")
        assert early.status_code == 422, early.text
        assert _violations(early) == ["day"]
        assert "has not begun" in early.json()["error"]["message"]
        yesterday = (date.fromisoformat(today()) - timedelta(days=1)).isoformat()
        for answer in (
            await http.get(f"/api/days/{yesterday}"),
            await http.post(f"/api/days/{yesterday}/generate"),
        ):
            assert answer.status_code == 404, answer.text
            assert answer.json()["error"]["code"] == "NOT_FOUND"
    assert [job.job_type for job in web.service.jobs] == [pb.JOB_TYPE_CARD_ANALYSIS]


async def test_a_day_made_on_request_comes_home_and_is_409_while_made(web: Web) -> None:
    day = today()
    async with web.login("") as http:
        first = await carded(web, http, "Queues", "Queues hold jobs.")
        second = await carded(web, http, "Workers", "Workers claim jobs.")
        listed = (await http.get("/api/days")).json()
        assert [(d["day"], d["status"]) for d in listed["days"]] == [(day, "OPEN")]

        made = await http.post(f"/api/days/{day}/generate")
        assert made.status_code == 202, made.text
        note_job, questions_job = made.json()["noteJobId"], made.json()["questionsJobId"]
        note = web.service.job(note_job)
        assert note.request_id == f"til:_:{day}"
        assert list(note.til_generation_input.notes) == ["Queues hold jobs.", "Workers claim jobs."]
        assert list(note.depends_on) == []  # both cards are made: they are notes
        questions = web.service.job(questions_job)
        assert questions.request_id == f"recall:_:{day}"
        assert list(questions.depends_on) == [note_job]
        assert questions.priority == 1  # somebody asked and waits
        assert [s.title for s in questions.recall_generation_input.sources] == [
            "Queues",
            "Workers",
        ]

        busy = await http.post(f"/api/days/{day}/generate")
        assert busy.status_code == 409, busy.text
        assert busy.json()["error"]["code"] == "FAILED_PRECONDITION"
        assert note_job in busy.json()["error"]["message"]

        # JobService makes them; the inbox brings them home. The fake added no source
        # for the note (JobService does): three questions, two of them from the cards.
        finish_day(web, note_job, questions_job, questions=2)
        shown = await eventually(
            lambda: _completed(http, day), "the day's note and questions came home"
        )
        assert shown["note"]["title"] == "Queues" and shown["note"]["body"] == "Queues hold jobs."
        assert [(q["question"], q["scrapId"]) for q in shown["questions"]] == [
            ("Q0?", first),
            ("Q1?", second),
        ]
        assert [q["id"] for q in shown["questions"]] == [f"{questions_job}:0", f"{questions_job}:1"]
        assert shown["failedScrap"] is None
        assert [s["scrapId"] for s in shown["scraps"]] == [first, second]
        listed = (await http.get("/api/days")).json()["days"]
        assert [
            (d["day"], d["status"], d["hasQuestions"], d["questionCount"], d["scrapCount"])
            for d in listed
        ] == [(day, "COMPLETED", True, 2, 2)]

        again = await http.post(f"/api/days/{day}/generate")
        assert again.status_code == 202, again.text
        assert web.service.job(again.json()["noteJobId"]).request_id == f"til:_:{day}:2"
        assert web.service.job(again.json()["questionsJobId"]).request_id == f"recall:_:{day}:2"
        # The first making's answers still shown until the second's arrive.
        assert (await day_of(http, day))["note"]["title"] == "Queues"


async def _completed(http: httpx.AsyncClient, day: str) -> dict[str, Any] | None:
    shown = await day_of(http, day)
    return shown if shown["status"] == "COMPLETED" and shown["questions"] else None


async def test_a_card_still_running_is_a_dependency_and_its_failure_cancels_the_day(
    web: Web,
) -> None:
    day = today()
    async with web.login("") as http:
        await carded(web, http, "Queues", "Queues hold jobs.")
        running = await web.save(http, "Workers")
        card_job = (await http.get(f"/api/scraps/{running}")).json()["jobId"]
        made = await http.post(f"/api/days/{day}/generate")
        assert made.status_code == 202, made.text
        note = web.service.job(made.json()["noteJobId"])
        assert list(note.til_generation_input.notes) == ["Queues hold jobs."]
        assert list(note.depends_on) == [card_job]
        assert list(note.waiting_for.job_ids) == [card_job]
        questions = web.service.job(made.json()["questionsJobId"])
        assert list(questions.depends_on) == [note.id, card_job]
        # The card made ("Queues") is a source whose key terms are its tags.
        (source,) = questions.recall_generation_input.sources
        assert (source.title, list(source.key_terms)) == ("Queues", ["t"])

        web.service.fail(card_job, "the provider answered 500")
        shown = await eventually(
            lambda: _status(http, day, "CANCELLED"), "the day told of the failed card"
        )
        assert shown["error"] == f"Dependency {card_job} FAILED"
        assert shown["failedScrap"] == {"scrapId": running, "title": "Workers"}
        assert shown["note"] is None
        # The card is done again; generate makes the day with it.
        retried = web.service.retry_failed(pb.RetryFailedRequest(job_ids=[card_job]))
        assert list(retried.job_ids) == [card_job]
        await web.complete(http, running, [0.0, 1.0], summary="Workers claim jobs.")
        again = await http.post(f"/api/days/{day}/generate")
        assert again.status_code == 202, again.text
        note = web.service.job(again.json()["noteJobId"])
        assert list(note.til_generation_input.notes) == ["Queues hold jobs.", "Workers claim jobs."]
        assert list(note.depends_on) == []


async def _status(http: httpx.AsyncClient, day: str, status: str) -> dict[str, Any] | None:
    shown = await day_of(http, day)
    return shown if shown["status"] == status else None


async def test_a_day_is_made_again_a_bounded_number_of_times(web: Web) -> None:
    """Each making is a note and questions on the provider's budget: a careless or
    hostile page cannot loop on generate for ever."""
    day = today()
    async with web.login("") as http:
        await carded(web, http, "Queues", "Queues hold jobs.")
        for _ in range(MAX_GENERATIONS):
            made = await http.post(f"/api/days/{day}/generate")
            assert made.status_code == 202, made.text
            finish_day(web, made.json()["noteJobId"], made.json()["questionsJobId"], 1)
            await eventually(lambda: _completed(http, day), "the making came home")
        refused = await http.post(f"/api/days/{day}/generate")
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "RESOURCE_EXHAUSTED"
        assert f"made {MAX_GENERATIONS} times" in refused.json()["error"]["message"]
    assert len(web.service.jobs) == 1 + 2 * MAX_GENERATIONS


async def test_a_second_user_never_sees_or_makes_the_first_ones_day(web_login: Web) -> None:
    web, day = web_login, today()
    async with web.login("ann") as ann, web.login("bob") as bob:
        await carded(web, ann, "Ann's queues", "Queues hold jobs.")
        made = await ann.post(f"/api/days/{day}/generate")
        assert made.status_code == 202, made.text
        note_job = made.json()["noteJobId"]
        assert web.service.job(note_job).request_id == f"til:ann:{day}"

        assert (await bob.get("/api/days")).json()["days"] == []
        for answer in (
            await bob.get(f"/api/days/{day}"),
            await bob.post(f"/api/days/{day}/generate"),
            await bob.get(f"/api/async-jobs/{note_job}"),
        ):
            assert answer.status_code == 404, answer.text
            assert "Ann" not in answer.text and "Queues" not in answer.text
        assert (await ann.get(f"/api/async-jobs/{note_job}")).status_code == 200
        await carded(web, bob, "Bob's workers", "Workers claim jobs.")
        bobs = await bob.post(f"/api/days/{day}/generate")
        assert bobs.status_code == 202, bobs.text  # Ann's day being made does not block his
        bobs_note = web.service.job(bobs.json()["noteJobId"])
        assert list(bobs_note.til_generation_input.notes) == ["Workers claim jobs."]
        shown = await day_of(ann, day)
        assert [s["title"] for s in shown["scraps"]] == ["Ann's queues"]


async def test_a_scrap_deleted_while_its_card_is_awaited_is_left_out_not_the_day(
    web: Web,
) -> None:
    """Deleting a scrap cancels its card's job, and JobService cancels the day's note
    and questions waiting for it: the day was CANCELLED for a scrap the user meant to
    drop. Now the day is made again without it, and completes."""
    day = today()
    async with web.login("") as http:
        await carded(web, http, "Queues", "Queues hold jobs.")
        running = await web.save(http, "Workers")
        card_job = (await http.get(f"/api/scraps/{running}")).json()["jobId"]
        made = await http.post(f"/api/days/{day}/generate")
        assert made.status_code == 202, made.text
        first_note = web.service.job(made.json()["noteJobId"])
        assert list(first_note.depends_on) == [card_job]

        deleted = await http.delete(f"/api/scraps/{running}")
        assert deleted.status_code == 200, deleted.text
        assert deleted.json()["cancelledJobIds"] == [card_job]
        assert web.service.job(first_note.id).status == pb.JOB_STATUS_CANCELLED
        shown = await day_of(http, day)
        assert shown["generation"] == 2 and shown["status"] == "MAKING", shown
        note = web.service.job(shown["noteJobId"])
        assert note.request_id == f"til:_:{day}:2"
        assert list(note.til_generation_input.notes) == ["Queues hold jobs."]
        assert list(note.depends_on) == []
        finish_day(web, shown["noteJobId"], shown["questionsJobId"], 1)
        done = await eventually(lambda: _completed(http, day), "the day made again completed")
        assert [s["title"] for s in done["scraps"]] == ["Queues"]


async def test_a_scrap_deleted_before_its_days_note_runs_is_not_in_it(web: Web) -> None:
    """Its card was made, and its summary sent as one of the note's notes; the note has
    not run: san-web cancels it and makes the day again without the scrap. A day whose
    note ran keeps it (deleting a scrap does not unmake what was learned)."""
    day = today()
    async with web.login("") as http:
        await carded(web, http, "Queues", "Queues hold jobs.")
        workers = await carded(web, http, "Workers", "Workers claim jobs.")
        made = (await http.post(f"/api/days/{day}/generate")).json()
        first_note = web.service.job(made["noteJobId"])
        assert len(first_note.til_generation_input.notes) == 2

        assert (await http.delete(f"/api/scraps/{workers}")).status_code == 200
        assert web.service.job(first_note.id).status == pb.JOB_STATUS_CANCELLED
        shown = await day_of(http, day)
        assert shown["generation"] == 2, shown
        note = web.service.job(shown["noteJobId"])
        assert list(note.til_generation_input.notes) == ["Queues hold jobs."]
        finish_day(web, shown["noteJobId"], shown["questionsJobId"], 1)
        await eventually(lambda: _completed(http, day), "the day made again completed")
        # Completed: deleting its last scrap leaves the day as it is.
        queues = shown["scraps"][0]["scrapId"]
        assert (await http.delete(f"/api/scraps/{queues}")).status_code == 200
        after = await day_of(http, day)
        assert after["generation"] == 2 and after["status"] == "COMPLETED", after


async def test_an_ended_day_is_made_once_by_every_san_web_that_looks(web: Web) -> None:
    day = today()
    async with web.login("") as http:
        await carded(web, http, "Queues", "Queues hold jobs.")
        await carded(web, http, "Workers", "Workers claim jobs.")
        store: ScrapStore = web.app.state.store
        live: Days = web.app.state.days
        assert await live.plan_ended_days() == []  # the day is open

        after_the_end = datetime.now(UTC) + timedelta(days=1)

        def instance() -> Days:  # another san-web on the same database, a day later
            client = web.service.async_client()
            return Days(store, client, web.app.state.outbox, QUIET, now=lambda: after_the_end)

        made = await asyncio.gather(*(instance().plan_ended_days() for _ in range(3)))
        assert sum(len(m) for m in made) >= 1
        assert await instance().plan_ended_days() == []  # already made
        days_jobs = [j for j in web.service.jobs if j.job_type != pb.JOB_TYPE_CARD_ANALYSIS]
        assert sorted(j.request_id for j in days_jobs) == [f"recall:_:{day}", f"til:_:{day}"]
        note = next(j for j in days_jobs if j.job_type == pb.JOB_TYPE_TIL_GENERATION)
        assert list(note.til_generation_input.notes) == ["Queues hold jobs.", "Workers claim jobs."]
        assert all(j.priority == 4 for j in days_jobs)  # bulk work, behind the page's
        async with store.engine.connect() as conn:
            assert (
                await conn.execute(sa.select(sa.func.count()).select_from(daily_notes))
            ).scalar_one() == 1


async def test_the_callers_time_zone_is_theirs_to_set(web_login: Web) -> None:
    async with web_login.login("ann") as ann:
        assert (await ann.get("/api/me")).json() == {
            "user": "ann",
            "timeZone": "UTC",
            "tilAt": "21:00",
        }
        for body, field in (
            ({"timeZone": "Mars/Olympus"}, "timeZone"),
            ({"timeZone": "../../etc/passwd"}, "timeZone"),
            ({"timeZone": 3}, "timeZone"),
            ({}, "timeZone"),
        ):
            answer = await ann.put("/api/me", json=body)
            assert answer.status_code == 422, (body, answer.text)
            assert _violations(answer) == [field]
        ann.headers.pop("X-CSRF-Token")
        forged = await ann.put("/api/me", json={"timeZone": "Asia/Tokyo"})
        assert forged.status_code == 403, forged.text  # another site's form cannot
        ann.headers["X-CSRF-Token"] = (await ann.get("/api/session")).json()["csrfToken"]
        set_zone = await ann.put("/api/me", json={"timeZone": "Asia/Tokyo"})
        assert set_zone.status_code == 200, set_zone.text
        assert set_zone.json()["timeZone"] == "Asia/Tokyo"
        await web_login.save(ann, "Queues")
        shown = (await ann.get("/api/days")).json()["days"][0]
        tokyo = Calendar(time(21, 0), ZoneInfo("Asia/Tokyo"))
        assert shown["day"] == tokyo.day_of(datetime.now(UTC)).isoformat()
        assert shown["endsAt"] == tokyo.window(tokyo.day_of(datetime.now(UTC)))[1].isoformat()
    async with web_login.login("bob") as bob:
        assert (await bob.get("/api/me")).json()["timeZone"] == "UTC"  # Ann's is hers


async def test_the_shared_space_keeps_san_webs_time_zone(web: Web) -> None:
    async with web.login("") as shared:
        refused = await shared.put("/api/me", json={"timeZone": "Asia/Tokyo"})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "FAILED_PRECONDITION"
        assert (await shared.get("/api/me")).json()["timeZone"] == "UTC"


def test_users_set_time_zone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"

    async def add_ann() -> None:
        store = await ScrapStore.open(url)
        await store.add_user("ann", "argon2-hash")
        await store.close()

    async def zones() -> dict[str, str | None]:
        store = await ScrapStore.open(url)
        try:
            return await store.time_zones()
        finally:
            await store.close()

    asyncio.run(add_ann())
    run = lambda *argv: users_main(list(argv), default_database_url=url)  # noqa: E731
    assert run("set-time-zone", "ann", "Europe/Paris") == 0
    assert "Europe/Paris" in capsys.readouterr().out
    assert asyncio.run(zones()) == {"ann": "Europe/Paris"}
    assert run("set-time-zone", "ann", "Nowhere/City") == 2
    error = capsys.readouterr().err
    assert "'Nowhere/City' is not an IANA time zone name" in error and "Traceback" not in error
    assert run("set-time-zone", "zoe", "UTC") == 1
    assert "no user 'zoe'" in capsys.readouterr().err
    assert run("set-time-zone", "ann", "default") == 0
    assert asyncio.run(zones()) == {"ann": None}


async def test_a_change_applied_twice_or_of_an_older_making_changes_nothing(web: Web) -> None:
    day = today()
    days: Days = web.app.state.days
    store: ScrapStore = web.app.state.store
    async with web.login("") as http:
        await carded(web, http, "Queues", "Queues hold jobs.")
        made = (await http.post(f"/api/days/{day}/generate")).json()
        finish_day(web, made["noteJobId"], made["questionsJobId"], questions=1)
        await eventually(lambda: _completed(http, day), "the first making came home")
        first = web.service.job(made["noteJobId"])
        again = await http.post(f"/api/days/{day}/generate")  # generation 2, active
        assert again.status_code == 202, again.text

    async def note() -> tuple[Any, ...]:
        async with store.engine.connect() as conn:
            row = (await conn.execute(sa.select(daily_notes))).one()
        return (row.generation, row.title, row.til_status, row.til_job_id)

    before = await note()
    assert before[:3] == (2, "Queues", None)  # generation 2 is being made
    stale = web.service.job(first.id)
    stale.til_generation_result.title = "Stale"
    for _ in range(2):
        async with store.engine.begin() as conn:
            await days.apply_job_change(conn, stale)
    assert await note() == before  # the older making's news is not the day's
    current = web.service.job(before[3])
    current.status = pb.JOB_STATUS_COMPLETED
    current.til_generation_result.CopyFrom(TilGenerationResult(title="Two", body="B2", model="m"))
    current.complete_time.FromSeconds(1_900_000_000)
    for _ in range(2):
        async with store.engine.begin() as conn:
            await days.apply_job_change(conn, current)
        assert await note() == (2, "Two", "COMPLETED", before[3])
    foreign = pb.Job(id="x", request_id=f"til:_:{day}:2", requested_by="someone-else")
    async with store.engine.begin() as conn:
        await days.apply_job_change(conn, foreign)  # not san-web's
    assert await note() == (2, "Two", "COMPLETED", before[3])


def test_a_day_is_the_span_between_two_ends_of_day_in_its_zone() -> None:
    paris = Calendar(parse_til_at("21:00"), ZoneInfo("Europe/Paris"))
    # 20:59 in Paris (summer, UTC+2) is still 1 July; 21:00 is 2 July's first minute.
    assert paris.day_of(datetime(2026, 7, 1, 18, 59, tzinfo=UTC)) == date(2026, 7, 1)
    assert paris.day_of(datetime(2026, 7, 1, 19, 0, tzinfo=UTC)) == date(2026, 7, 2)
    start, end = paris.window(date(2026, 7, 2))
    assert (start, end) == (
        datetime(2026, 7, 1, 19, 0, tzinfo=UTC),
        datetime(2026, 7, 2, 19, 0, tzinfo=UTC),
    )
    # Across the change to winter time the day is 25 hours long, and none falls between.
    start, end = paris.window(date(2026, 10, 25))
    assert end - start == timedelta(hours=25)
    assert paris.window(date(2026, 10, 26))[0] == end
    assert paris.ended(datetime(2026, 7, 1, 19, 0, tzinfo=UTC), back=2) == [
        date(2026, 6, 30),
        date(2026, 7, 1),
    ]
    assert parse_til_at("00:00:30") == time(0, 0, 30)
    for bad in ("24:00", "9:00", "21:00 ", "21h", ""):
        with pytest.raises(ValueError, match="is not HH:MM"):
            parse_til_at(bad)


async def test_a_day_of_150_long_cards_fits_the_gateways_token_limit(web: Web) -> None:
    """Issue 43's big day: 150 cards of 600-character summaries (about 22,500 tokens
    by the gateway's estimate, its limit 8,192) are all in the note, each condensed to
    a fair share of INPUT_TOKENS; the recall's titles and texts fit too, and the day
    says how many cards its note covers."""
    day = today()
    store = web.store()
    summaries = [
        f"Card {i}: " + " ".join(["queues hold jobs for the workers"] * 18) for i in range(150)
    ]
    saved = [
        await store.add(url="", title=f"Scrap {i} " + "long title " * 50, text="t")
        for i in range(150)
    ]
    async with store.engine.begin() as conn:
        await conn.execute(
            knowledge_cards.insert(),
            [
                {
                    "scrap_id": scrap.id,
                    "job_id": f"job-{i}",
                    "job_created_ns": i,
                    "summary": summary,
                    "tags": [],
                    "embedding": b"",
                    "model": "m",
                    "created_at": datetime.now(UTC),
                }
                for i, (scrap, summary) in enumerate(zip(saved, summaries, strict=True))
            ],
        )
    assert sum(map(estimate_tokens, summaries)) > 20_000
    async with web.login("") as http:
        made = await http.post(f"/api/days/{day}/generate")
        assert made.status_code == 202, made.text
        notes = list(web.service.job(made.json()["noteJobId"]).til_generation_input.notes)
        assert len(notes) == 150
        assert sum(map(estimate_tokens, notes)) <= INPUT_TOKENS
        for note, summary in zip(notes, summaries, strict=True):
            assert note.endswith("…") and summary.startswith(note[:-1].rstrip())
            assert estimate_tokens(note) >= INPUT_TOKENS // 150 * 9 // 10  # cut at a space
        recall = web.service.job(made.json()["questionsJobId"]).recall_generation_input
        sources = [(s.title, s.text) for s in recall.sources]
        assert len(sources) == 99  # MAX_SOURCES, one left for the note
        assert all(len(title) <= 48 for title, _ in sources)
        assert sum(estimate_tokens(t) + estimate_tokens(x) for t, x in sources) <= (
            INPUT_TOKENS - NOTE_TOKENS
        )
        shown = await day_of(http, day)
        assert shown["cards"] == {"covered": 150, "of": 150}


async def test_a_day_waits_a_bounded_while_for_more_cards_being_made_than_fit(
    web: Web,
) -> None:
    """More cards still being made at the end of a day than MAX_WAITING_CARDS: each
    adds its whole summary (JobService merges it), up to SUMMARY_TOKENS, so the day
    waits for them (sent as 100 dependencies, their summaries came to 22,530 tokens and
    the gateway refused the note for good); CARDS_WAIT past its end it goes with the
    newest that fit, and says how many of its cards the note covers."""
    day = today()
    async with web.login("") as http:
        await carded(web, http, "Queues", "Queues hold jobs.")
        making = [await web.save(http, f"Making {i}") for i in range(MAX_WAITING_CARDS + 4)]
        jobs = [(await http.get(f"/api/scraps/{s}")).json()["jobId"] for s in making]
        store: ScrapStore = web.app.state.store
        _, end = Calendar(time(21, 0), ZoneInfo("UTC")).window(date.fromisoformat(day))
        moment = end + timedelta(seconds=1)

        def instance() -> Days:
            client = web.service.async_client()
            return Days(store, client, web.app.state.outbox, QUIET, now=lambda: moment)

        assert await instance().plan_ended_days() == []  # it waits for its cards
        assert not [j for j in web.service.jobs if j.job_type != pb.JOB_TYPE_CARD_ANALYSIS]
        shown = await day_of(http, day)
        assert shown["status"] == "MAKING" and shown["cards"] is None
        # Four of them are made: the rest fit, and go as dependencies.
        for scrap in making[:4]:
            await web.complete(http, scrap, [1.0, 0.0], summary=f"Card {scrap} made.")
        assert await instance().plan_ended_days() == [("_", day)]
        note = next(j for j in web.service.jobs if j.job_type == pb.JOB_TYPE_TIL_GENERATION)
        assert list(note.depends_on) == jobs[4:]
        assert len(note.til_generation_input.notes) == 5

    # The day before, its cards (jobs JobService holds, here only their ids) stuck.
    later_day = date.fromisoformat(day) - timedelta(days=1)
    async with store.engine.begin() as conn:
        for i in range(MAX_WAITING_CARDS + 2):
            await conn.execute(
                scraps.insert().values(
                    id=f"stuck-{i:02d}",
                    url="",
                    title=f"Stuck {i}",
                    text="t",
                    job_id=f"job-stuck-{i:02d}",
                    created_at=datetime.combine(later_day, time(12, i), tzinfo=UTC),
                )
            )
    _, later_end = Calendar(time(21, 0), ZoneInfo("UTC")).window(later_day)
    moment = later_end + CARDS_WAIT - timedelta(seconds=1)
    assert ("_", later_day.isoformat()) not in await instance().plan_ended_days()
    moment = later_end + CARDS_WAIT
    plan = await instance()._new_plan(
        None,
        Calendar(time(21, 0), ZoneInfo("UTC")),
        later_day,
        wait=True,
    )
    assert isinstance(plan, dict), plan
    assert plan["depends_on"] == [f"job-stuck-{i:02d}" for i in range(2, MAX_WAITING_CARDS + 2)]
    assert plan["cards"] == {"covered": MAX_WAITING_CARDS, "of": MAX_WAITING_CARDS + 2}


def test_condense_keeps_what_fits_and_shares_the_rest_fairly() -> None:
    assert condense(["a" * 40, "b" * 40], 20) == ["a" * 40, "b" * 40]  # 10 tokens each
    short, long = "short note", "word " * 400  # 3 and 500 tokens
    kept = condense([short, long, long], 203)
    assert kept[0] == short and all(95 <= estimate_tokens(k) <= 100 for k in kept[1:])
    assert kept[1].endswith("…") and long.startswith(kept[1][:-1])
    # Korean costs a token a character, as the gateway counts it.
    korean = condense(["가" * 500, "나" * 500], 200)
    assert [estimate_tokens(k) for k in korean] == [100, 100]  # no spaces to cut at
    # Too many cards for a useful share each: the first ones, MIN_CARD_TOKENS at least.
    many = condense(["word " * 100] * 1000, 3200)
    assert len(many) == 100 and sum(map(estimate_tokens, many)) <= 3200


def test_san_webs_token_estimate_is_the_gateways() -> None:
    for text in (
        "",
        "abc",
        "Queues hold jobs. " * 40,
        "큐는 작업을 담는다 " * 30,
        "日本語とEnglish",
    ):
        assert estimate_tokens(text) == gateway_estimate(text)


async def test_days_are_listed_newest_first_a_page_at_a_time(web: Web) -> None:
    store = web.store()
    open_day = date.fromisoformat(today())
    past = [(open_day - timedelta(days=n)).isoformat() for n in (1, 2, 3)]
    async with web.login("") as http:
        for n, day in enumerate(past, start=1):
            for title in [f"Scrap {day} {i}" for i in range(n)]:
                scrap_id = await carded(web, http, title, f"About {title}.")
                async with store.engine.begin() as conn:  # saved that day, at noon
                    noon = datetime.fromisoformat(f"{day}T12:00:00+00:00")
                    await conn.execute(
                        scraps.update().where(scraps.c.id == scrap_id).values(created_at=noon)
                    )
            made = await http.post(f"/api/days/{day}/generate")
            assert made.status_code == 202, made.text
        await carded(web, http, "Today's", "About today.")

        first = (await http.get("/api/days", params={"pageSize": "2"})).json()
        assert [(d["day"], d["status"], d["scrapCount"]) for d in first["days"]] == [
            (open_day.isoformat(), "OPEN", 1),
            (past[0], "MAKING", 1),
            (past[1], "MAKING", 2),
        ]
        assert all(d["questionCount"] == 0 for d in first["days"])
        assert first["nextPageToken"]
        second = (
            await http.get(
                "/api/days", params={"pageSize": "2", "pageToken": first["nextPageToken"]}
            )
        ).json()
        assert [(d["day"], d["scrapCount"]) for d in second["days"]] == [(past[2], 3)]
        assert second["nextPageToken"] == ""
        whole = (await http.get("/api/days")).json()
        assert [d["day"] for d in whole["days"]] == [open_day.isoformat(), *past]
        for params, field in (
            ({"pageSize": "0"}, "pageSize"),
            ({"pageSize": "101"}, "pageSize"),
            ({"pageSize": "two"}, "pageSize"),
            ({"pageToken": "not-a-day"}, "pageToken"),
        ):
            answer = await http.get("/api/days", params=params)
            assert answer.status_code == 400, (params, answer.text)
            assert _violations(answer) == [field]


async def test_the_callers_end_of_day_is_theirs_to_set(web_login: Web) -> None:
    async with web_login.login("ann") as ann, web_login.login("bob") as bob:
        assert (await ann.get("/api/me/settings")).json()["tilAt"] == "21:00"
        for body, fields in (
            ({"tilAt": "25:00"}, ["tilAt"]),
            ({"tilAt": "7:30"}, ["tilAt"]),
            ({"tilAt": 730}, ["tilAt"]),
            ({"tilAt": "26:00", "timeZone": "Mars/Olympus"}, ["timeZone", "tilAt"]),
            ({}, ["timeZone"]),
            ([], ["body"]),
        ):
            answer = await ann.put("/api/me/settings", json=body)
            assert answer.status_code == 422, (body, answer.text)
            assert _violations(answer) == fields
        set_both = await ann.put(
            "/api/me/settings", json={"tilAt": "07:30", "timeZone": "Asia/Tokyo"}
        )
        assert set_both.status_code == 200, set_both.text
        assert set_both.json() == {"user": "ann", "timeZone": "Asia/Tokyo", "tilAt": "07:30"}
        await web_login.save(ann, "Queues")
        shown = (await ann.get("/api/days")).json()["days"][0]
        hers = Calendar(time(7, 30), ZoneInfo("Asia/Tokyo"))
        today = hers.day_of(datetime.now(UTC))
        assert (shown["day"], shown["endsAt"]) == (
            today.isoformat(),
            hers.window(today)[1].isoformat(),
        )
        assert (await bob.get("/api/me/settings")).json()["tilAt"] == "21:00"  # hers only
        only_zone = await ann.put("/api/me/settings", json={"timeZone": None})
        assert only_zone.json() == {"user": "ann", "timeZone": "UTC", "tilAt": "07:30"}
        reset = await ann.put("/api/me/settings", json={"tilAt": None})
        assert reset.json()["tilAt"] == "21:00"


async def test_the_planner_ends_each_users_day_at_their_own_time(web_login: Web) -> None:
    web, store = web_login, web_login.store()
    now = datetime.now(UTC)
    async with web.login("ann") as ann, web.login("bob") as bob:
        await carded(web, ann, "Ann's", "Queues hold jobs.")
        await carded(web, bob, "Bob's", "Workers claim jobs.")
        for http, hours in ((ann, 2), (bob, 6)):  # in UTC, to the minute
            til_at = (now + timedelta(hours=hours)).strftime("%H:%M")
            assert (await http.put("/api/me/settings", json={"tilAt": til_at})).status_code == 200
    later = now + timedelta(hours=2, minutes=5)  # Ann's day has ended, Bob's has not
    settings = DaySettings(check_interval=3600, shared_space=False)
    planner = Days(
        store, web.service.async_client(), web.app.state.outbox, settings, now=lambda: later
    )
    made = await planner.plan_ended_days()
    assert [key for key, _ in made] == ["ann"]
    days_jobs = [j.request_id for j in web.service.jobs if j.job_type != pb.JOB_TYPE_CARD_ANALYSIS]
    assert len(days_jobs) == 2 and all(":ann:" in r for r in days_jobs)
