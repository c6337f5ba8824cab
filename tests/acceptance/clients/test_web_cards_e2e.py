"""The goals of issue 24 with real processes: san-web's knowledge cards come home through
JobService's change feed and the SDK's transactional inbox, so a card outlives its
job's retention, survives san-web being killed (-9) at any point of the inbox, and is
written once however many san-webs share the database.

Effects are counted in san-web's database itself: before san-web starts, the test
adds triggers on ``knowledge_cards`` that record every insert and update into a table
of its own (``card_writes``), in the writing transaction. A delivery that was rolled
back leaves no row there; a change applied twice leaves two (the handler's upsert
would turn the second into an update). Nothing of san-web is changed for that.

The kill loop also watches the handler from inside san-web's process, without
changing san-web's code: it runs san-web through a small launcher (written by the
test) that wraps ``apply_job_change`` to append a line to a file as each call enters,
as san-web's handler begins and as it ends, so each kill can be placed (before the
handler, inside it, after it but before the commit, after the commit). Between the
first two lines it waits a random 0-5 ms, as a handler with work of its own before
it writes would: that widens the "before the handler" window for the kills.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from conftest import Stack, _stack, _stop, scrap_job_id, start_web
from sqlalchemy.ext.asyncio import create_async_engine
from test_web_outbox import jobs_by_target, post_scraps

from san_jobs.client import JobNotFoundError, JobsClient, JobStatus
from san_jobs.client.inbox import inbox_tables
from san_jobs.web._store import ScrapStore
from tests.support.ci import skip_or_fail_in_ci
from tests.support.databases import (
    create_temp_postgres_database,
    drop_database,
    require_postgres,
    run_sync,
)
from tests.support.processes import RunningService, start_service

pytestmark = pytest.mark.acceptance

CONSUMER = "san-web-cards"  # san_jobs.web.app.CARDS_CONSUMER
_INBOX, _ = inbox_tables(sa.MetaData())

# The counter of effects: one row per write of a card, committed with it.
_AUDIT = {
    "sqlite": [
        "CREATE TABLE card_writes (id INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT NOT NULL, "
        "scrap_id TEXT NOT NULL, job_id TEXT NOT NULL)",
        "CREATE TRIGGER card_inserted AFTER INSERT ON knowledge_cards BEGIN "
        "INSERT INTO card_writes (op, scrap_id, job_id) "
        "VALUES ('insert', NEW.scrap_id, NEW.job_id); END",
        "CREATE TRIGGER card_updated AFTER UPDATE ON knowledge_cards BEGIN "
        "INSERT INTO card_writes (op, scrap_id, job_id) "
        "VALUES ('update', NEW.scrap_id, NEW.job_id); END",
    ],
    "postgresql": [
        "CREATE TABLE card_writes (id BIGSERIAL PRIMARY KEY, op TEXT NOT NULL, "
        "scrap_id TEXT NOT NULL, job_id TEXT NOT NULL)",
        "CREATE FUNCTION card_written() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO card_writes (op, scrap_id, job_id) "
        "VALUES (lower(TG_OP), NEW.scrap_id, NEW.job_id); RETURN NEW; END $$",
        "CREATE TRIGGER card_written AFTER INSERT OR UPDATE ON knowledge_cards "
        "FOR EACH ROW EXECUTE FUNCTION card_written()",
    ],
}

# san-web with its change handler observed (see the module's docstring). The inbox
# calls it in the change's transaction, right after the fenced UPDATE that moved the
# cursor: it appends "enter PID JOB", waits a random 0-5 ms (a handler with some work
# of its own before it writes: this widens the "before the handler" window, where the
# cursor has moved in the open transaction and nothing was applied), appends
# "begin PID JOB", runs san-web's handler, then "end PID JOB" (before the inbox
# commits). os.write reaches the kernel at once, so a kill -9 loses no line.
_LAUNCHER = """\
import asyncio
import os
import random

import san_jobs.web._cards as cards

_probe = os.open(os.environ["SAN_TEST_HANDLER_PROBE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
_handler = cards.apply_job_change


def _line(word, job):
    os.write(_probe, f"{word} {os.getpid()} {job.id}\\n".encode())


async def observed(conn, job):
    _line("enter", job)
    await asyncio.sleep(random.uniform(0, 0.005))
    _line("begin", job)
    await _handler(conn, job)
    _line("end", job)


cards.apply_job_change = observed  # before san_jobs.web.app imports it

from san_jobs._console_scripts import san_web  # noqa: E402

san_web()
"""


# -- san-web's database, read and prepared by the test -----------------------------------


def sqlite_url(folder: Path) -> str:
    return f"sqlite+aiosqlite:///{folder / 'san-web.db'}"


def query(url: str, sql: str, **params: Any) -> list[Any]:
    """The rows of ``sql`` on san-web's database (a fresh engine each time)."""

    async def run() -> list[Any]:
        engine = create_async_engine(url)
        try:
            async with engine.begin() as conn:
                return list((await conn.execute(sa.text(sql), params)).all())
        finally:
            await engine.dispose()

    return run_sync(run)


def prepare_database(url: str) -> None:
    """san-web's tables, made as san-web makes them at start, and the counter of
    effects on ``knowledge_cards``."""

    async def run() -> None:
        store = await ScrapStore.open(url)
        try:
            async with store.engine.begin() as conn:
                for statement in _AUDIT[conn.dialect.name]:
                    await conn.execute(sa.text(statement))
        finally:
            await store.close()

    run_sync(run)


def expire_lease(url: str) -> None:
    """End the cards consumer's lease as its expiry would (its holder is dead)."""

    async def run() -> None:
        engine = create_async_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.execute(
                    sa.update(_INBOX)
                    .where(_INBOX.c.consumer == CONSUMER)
                    .values(lease_until=datetime(2000, 1, 1))
                )
        finally:
            await engine.dispose()

    run_sync(run)


def card_writes(url: str) -> list[tuple[str, str, str]]:
    """Every write of a card so far: (op, scrap_id, job_id)."""
    rows = query(url, "SELECT op, scrap_id, job_id FROM card_writes ORDER BY id")
    return [(row.op, row.scrap_id, row.job_id) for row in rows]


def assert_each_card_written_once(url: str, jobs: dict[str, str]) -> None:
    """``jobs`` (scrap id -> its one job) is exactly what san-web's database holds:
    one card per scrap, made by the scrap's job, inserted once and never rewritten;
    one scrap_jobs row per job; no parked change; the consumer's cursor stored."""
    cards = {row.scrap_id: row.job_id for row in query(url, "SELECT * FROM knowledge_cards")}
    assert cards == jobs
    writes = card_writes(url)
    assert Counter(op for op, _, _ in writes) == {"insert": len(jobs)}, writes
    assert sorted(job for _, _, job in writes) == sorted(jobs.values())
    recorded = query(url, "SELECT job_id, scrap_id FROM scrap_jobs")
    assert sorted((row.scrap_id, row.job_id) for row in recorded) == sorted(jobs.items())
    assert query(url, "SELECT * FROM san_jobs_inbox_parked") == []
    (inbox,) = query(url, "SELECT consumer, cursor FROM san_jobs_inbox")
    assert inbox.consumer == CONSUMER and inbox.cursor


# -- processes ---------------------------------------------------------------------------


@contextmanager
def services(folder: Path, gateway_args: list[str], job_args: list[str]) -> Iterator[Stack]:
    """A gateway and a job-service as the clients' other acceptance tests run them."""
    yield from _stack(folder, gateway_args, job_args)


def start_observed_web(
    log_dir: Path, job_service: str, database_url: str, probe: Path
) -> RunningService:
    """san-web as conftest.start_web starts it, through the launcher that records each
    handler call in ``probe``."""
    launcher = log_dir / "observed_san_web.py"
    if not launcher.exists():
        launcher.write_text(_LAUNCHER)
    return start_service(
        "san-web",
        ["python", str(launcher), "--listen", "127.0.0.1:0", "--job-service", job_service,
         "--database-url", database_url],
        log_dir,
        env={"SAN_TEST_HANDLER_PROBE": str(probe)},
    )  # fmt: skip


def shown_cards(base: str) -> dict[str, dict[str, Any]]:
    """Every scrap's card as ``GET /api/scraps`` lists them (scraps without one left out)."""
    found: dict[str, dict[str, Any]] = {}
    token = ""
    with httpx.Client(base_url=base, timeout=30) as client:
        while True:
            params = {"pageSize": "100", **({"pageToken": token} if token else {})}
            page = client.get("/api/scraps", params=params)
            assert page.status_code == 200, page.text
            body = page.json()
            found.update({s["scrapId"]: s["card"] for s in body["scraps"] if s["card"]})
            token = body["nextPageToken"]
            if not token:
                return found


def wait_for_cards(base: str, scrap_ids: list[str], within: float) -> dict[str, dict[str, Any]]:
    """The scraps' cards once all are shown; fails after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        cards = shown_cards(base)
        if all(scrap in cards for scrap in scrap_ids):
            return {scrap: cards[scrap] for scrap in scrap_ids}
        missing = [scrap for scrap in scrap_ids if scrap not in cards]
        assert time.monotonic() < deadline, f"{len(missing)} cards missing after {within:g} s"
        time.sleep(0.1)


def completed_jobs(job_service: str, scrap_ids: list[str]) -> dict[str, str]:
    """scrap id -> its job's id, for the scraps whose (one) job is COMPLETED."""
    jobs = jobs_by_target(job_service)
    done = {}
    for scrap in scrap_ids:
        found = jobs.get(scrap, [])
        assert len(found) <= 1, found
        if found and found[0].status == JobStatus.JOB_STATUS_COMPLETED:
            done[scrap] = found[0].id
    return done


def wait_until_completed(job_service: str, scrap_ids: list[str], within: float) -> dict[str, str]:
    deadline = time.monotonic() + within
    while len(done := completed_jobs(job_service, scrap_ids)) < len(scrap_ids):
        assert time.monotonic() < deadline, f"{len(done)} of {len(scrap_ids)} jobs completed"
        time.sleep(0.1)
    return done


# -- 1. a card outlives its job ----------------------------------------------------------


def test_every_card_stays_on_its_scrap_after_job_service_pruned_its_job(tmp_path: Path) -> None:
    """JobService keeps a completed job 3 s and prunes every second: the test waits
    those few seconds for the jobs to be gone (about 8 s in all)."""
    with services(tmp_path, [], ["--retain-completed", "3s", "--prune-interval", "1"]) as stack:
        url = sqlite_url(tmp_path)
        prepare_database(url)
        web = start_web(tmp_path, stack.address, database_url=url)
        try:
            base = f"http://{web.address}"
            scrap_ids = post_scraps(base, 3)
            job_ids = {scrap: scrap_job_id(base, scrap) for scrap in scrap_ids}
            made: dict[str, Any] = {}  # job id -> the result JobService kept, while it did
            with JobsClient(stack.address) as client:
                deadline = time.monotonic() + 30
                while len(made) < len(job_ids):
                    assert time.monotonic() < deadline, f"jobs not completed: {made.keys()}"
                    for job_id in set(job_ids.values()) - made.keys():
                        job = client.get_job(job_id)  # NotFound here: pruned before it was read
                        if job.status == JobStatus.JOB_STATUS_COMPLETED:
                            made[job_id] = job.card_analysis_result
                    time.sleep(0.05)
                wait_for_cards(base, scrap_ids, within=10)

                deadline = time.monotonic() + 20
                pruned: set[str] = set()
                while len(pruned) < len(job_ids):
                    assert time.monotonic() < deadline, f"not pruned: {set(made) - pruned}"
                    for job_id in set(job_ids.values()) - pruned:
                        try:
                            client.get_job(job_id)
                        except JobNotFoundError:
                            pruned.add(job_id)
                    time.sleep(0.2)
            print(f"{len(pruned)} jobs pruned")

            with httpx.Client(base_url=base, timeout=30) as web_client:
                for scrap, job_id in job_ids.items():
                    job_view = web_client.get(f"/api/async-jobs/{job_id}")
                    assert job_view.status_code == 404, job_view.text
                    card = web_client.get(f"/api/scraps/{scrap}").json()["card"]
                    assert card is not None, f"scrap {scrap} lost its card with its job"
                    result = made[job_id]
                    assert result.summary  # the local backend summarizes for real
                    assert card["jobId"] == job_id
                    assert card["summary"] == result.summary
                    assert card["tags"] == list(result.tags)
                    assert card["model"] == result.model
            assert set(shown_cards(base)) == set(scrap_ids)
            assert_each_card_written_once(url, job_ids)
        finally:
            _stop(web)


# -- 2. killed while its jobs complete ---------------------------------------------------


def test_san_web_killed_while_20_jobs_complete_has_all_20_cards_within_10_s_of_restart(
    tmp_path: Path,
) -> None:
    """The 20 jobs take about 5 s to complete (two at a time, 0.5 s each at the
    gateway), so that san-web can be killed while they do; the restarted san-web
    waits for the dead one's 5 s inbox lease to expire (about 12 s in all)."""
    gateway_args = ["--backend", "instant", "--fault-latency", "0.5"]
    with services(tmp_path, gateway_args, ["--workers", "2"]) as stack:
        url = sqlite_url(tmp_path)
        prepare_database(url)
        web = start_web(tmp_path, stack.address, database_url=url)
        try:
            base = f"http://{web.address}"
            scrap_ids = post_scraps(base, 20)
            deadline = time.monotonic() + 60
            while len(shown_cards(base)) < 3:
                assert time.monotonic() < deadline, "no card made"
                time.sleep(0.05)
            web.kill()
            at_kill = len(completed_jobs(stack.address, scrap_ids))
            cards_at_kill = len(query(url, "SELECT scrap_id FROM knowledge_cards"))
            print(f"killed with {cards_at_kill} cards, {at_kill} of 20 jobs completed")
            assert at_kill < 20, "every job had completed before the kill: too late to test"

            # Restarted at once, as a supervisor would: the dead instance's lease
            # (5 s) is still held, and jobs go on completing meanwhile.
            web = start_web(tmp_path, stack.address, database_url=url)
            back = time.monotonic()  # "listening on": the inbox has started
            at_back = len(completed_jobs(stack.address, scrap_ids))
            cards = wait_for_cards(f"http://{web.address}", scrap_ids, within=10)
            print(
                f"restarted with {at_back} of 20 jobs completed -> "
                f"all 20 cards {time.monotonic() - back:.2f} s after it was back"
            )
            jobs = completed_jobs(stack.address, scrap_ids)
            assert {scrap: card["jobId"] for scrap, card in cards.items()} == jobs
            assert len(query(url, "SELECT scrap_id FROM knowledge_cards")) == 20
            assert_each_card_written_once(url, jobs)
        finally:
            _stop(web)


# -- 3. two san-webs, one database -------------------------------------------------------


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for san-web."""
    reason = require_postgres()
    if reason is not None:
        skip_or_fail_in_ci(reason)
    url = create_temp_postgres_database(migrated=False)
    try:
        yield url
    finally:
        drop_database(url)


@pytest.mark.postgres
def test_two_san_webs_on_one_postgres_write_every_card_once(
    tmp_path: Path, postgres_url: str
) -> None:
    """The 20 jobs take about 4 s (two at a time, 0.4 s each at the gateway), so that
    the san-web consuming the feed can be killed (-9) while they complete; the other
    takes over once the dead one's 5 s inbox lease has expired (about 12 s in all)."""
    gateway_args = ["--backend", "instant", "--fault-latency", "0.4"]
    with services(tmp_path, gateway_args, ["--workers", "2"]) as stack:
        prepare_database(postgres_url)
        webs = [start_web(tmp_path, stack.address, database_url=postgres_url) for _ in range(2)]
        try:
            bases = [f"http://{web.address}" for web in webs]
            scrap_ids = post_scraps(bases[0], 10) + post_scraps(bases[1], 10)
            deadline = time.monotonic() + 60
            while len(shown_cards(bases[0])) < 5:
                assert time.monotonic() < deadline, "no card made"
                time.sleep(0.05)
            states = [httpx.get(f"{base}/healthz").json()["inbox"]["state"] for base in bases]
            assert sorted(states) == ["consuming", "standby"], states
            holder = states.index("consuming")
            webs[holder].kill()
            at_kill = len(completed_jobs(stack.address, scrap_ids))
            print(f"the consuming san-web killed with {at_kill} of 20 jobs completed")
            assert at_kill < 20, "every job had completed before the kill: too late to test"

            survivor = bases[1 - holder]
            jobs = wait_until_completed(stack.address, scrap_ids, within=60)
            cards = wait_for_cards(survivor, scrap_ids, within=15)
            assert {scrap: card["jobId"] for scrap, card in cards.items()} == jobs
            assert httpx.get(f"{survivor}/healthz").json()["inbox"]["state"] == "consuming"
            assert_each_card_written_once(postgres_url, jobs)
            scraps = query(postgres_url, "SELECT id, job_id FROM scraps")
            assert {row.id: row.job_id for row in scraps} == jobs
        finally:
            _stop(*webs)


# -- 4. the kill -9 loop -----------------------------------------------------------------


@dataclass
class KillLog:
    """Where each kill landed, from the handler's probe lines and the database."""

    places: Counter[str] = field(default_factory=Counter)

    def place(self, lines: list[list[str]], committed: set[str], journal: bool) -> str:
        """The place of a kill: ``lines`` are the killed process's probe lines,
        ``committed`` the jobs whose card is committed, ``journal`` whether SQLite's
        rollback journal was left (a write transaction was open)."""
        if not lines:
            place = "before any delivery" + (" (in a write transaction)" if journal else "")
        elif lines[-1][0] == "enter":
            place = "before the handler (the cursor moved in the open transaction)"
        elif lines[-1][0] == "begin":
            place = "inside the handler"
        elif lines[-1][2] not in committed:
            place = "after the handler, before the commit"
        elif journal:
            place = "after a commit, in another write transaction"
        else:
            place = "after a commit, between changes"
        self.places[place] += 1
        return place


JOBS_IN_LOOP = 50
# The places where a change is in flight: its transaction open, its cursor moved in it.
IN_FLIGHT = (
    "before the handler (the cursor moved in the open transaction)",
    "inside the handler",
    "after the handler, before the commit",
)


def test_kill_9_at_random_points_of_the_inbox_applies_every_card_exactly_once(
    tmp_path: Path,
) -> None:
    """The 50 jobs complete over about 18 s (two at a time, 0.7 s each at the gateway)
    while san-web is killed (-9) and restarted in a loop: about 25 s in all, since
    each san-web needs a second or more to start, and the loop needs at least 10
    kills among the deliveries.

    A third of the kills come a random 0.2-1.5 s after the start; the others a random
    0-10 ms after the handler's k-th call in that process (k from 1 to 3), which
    lands them before that call's handler, inside it, before or after its commit, or
    in the next delivery (the changes that completed while san-web was down come
    back to back). After each kill the
    test ends the dead instance's lease (as its expiry would 5 s later: san-web's
    inbox lease is not configurable), so that each new san-web consumes at once."""
    seed = int(os.environ.get("SAN_TEST_KILL_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (SAN_TEST_KILL_SEED)")
    rng = random.Random(seed)
    gateway_args = ["--backend", "instant", "--fault-latency", "0.7"]
    with services(tmp_path, gateway_args, ["--workers", "2"]) as stack:
        url = sqlite_url(tmp_path)
        journal = tmp_path / "san-web.db-journal"  # SQLite's, while a write is open
        prepare_database(url)
        probe = tmp_path / "handler-probe.log"
        probe.touch()
        web = start_observed_web(tmp_path, stack.address, url, probe)
        try:
            scrap_ids = post_scraps(f"http://{web.address}", JOBS_IN_LOOP)
            kills = KillLog()
            started = time.monotonic()
            deadline = started + 100
            while True:
                assert time.monotonic() < deadline, f"loop unfinished: {kills.places}"
                pid = str(web.proc.pid)
                if rng.random() < 1 / 3:
                    time.sleep(rng.uniform(0.2, 1.5))
                else:
                    wanted = rng.randint(1, 3)
                    until = time.monotonic() + 3
                    while time.monotonic() < until and _calls(probe, pid) < wanted:
                        time.sleep(0.001)
                    time.sleep(rng.uniform(0, 0.01))
                web.kill()
                in_transaction = journal.exists()  # looked at before anyone opens the file
                committed = {job for _, _, job in card_writes(url)}
                lines = [line for line in _probe_lines(probe) if line[1] == pid]
                place = kills.place(lines, committed, in_transaction)
                print(
                    f"{time.monotonic() - started:5.1f} s kill {kills.places.total()}: {place}; "
                    f"{sum(line[0] == 'enter' for line in lines)} handler calls in that "
                    f"process, {len(committed)} cards committed, journal {in_transaction}"
                )
                done = completed_jobs(stack.address, scrap_ids)
                if (
                    len(done) == JOBS_IN_LOOP
                    and set(done.values()) <= committed
                    and kills.places.total() >= 10
                ):
                    break
                expire_lease(url)
                web = start_observed_web(tmp_path, stack.address, url, probe)

            expire_lease(url)
            web = start_observed_web(tmp_path, stack.address, url, probe)
            cards = wait_for_cards(f"http://{web.address}", scrap_ids, within=15)
            assert {scrap: card["jobId"] for scrap, card in cards.items()} == done
            _stop(web)
            assert_each_card_written_once(url, done)
            calls = [line for line in _probe_lines(probe) if line[0] == "enter"]
            delivered = Counter(line[2] for line in calls)
            print(
                f"{kills.places.total()} kills, {len(calls)} handler calls for "
                f"{len(delivered)} jobs ({len(calls) - len(delivered)} again after a kill); "
                f"kills: {dict(kills.places)}"
            )
            assert set(delivered) == set(done.values())
            assert len(calls) >= JOBS_IN_LOOP
            in_flight = sum(n for place, n in kills.places.items() if place in IN_FLIGHT)
            assert in_flight >= 1, f"no kill landed in a delivery: {kills.places}"
        finally:
            _stop(web)


def _probe_lines(probe: Path) -> list[list[str]]:
    return [line.split() for line in probe.read_text().splitlines() if line.strip()]


def _calls(probe: Path, pid: str) -> int:
    return sum(1 for line in _probe_lines(probe) if line[0] == "enter" and line[1] == pid)


# -- 5. related scraps -------------------------------------------------------------------

RELATED_TEXTS = [
    "Sourdough bread needs a lively starter: feed the starter flour and water, let the "
    "dough rise overnight, then bake the loaf in a hot Dutch oven.",
    "A sourdough loaf begins with its starter. Mix the starter with flour, water and salt "
    "into a dough, let the dough rise slowly, then bake the bread in a very hot oven.",
    "PostgreSQL streaming replication ships the write-ahead log from the primary server "
    "to standby replicas over TCP.",
    "Jupiter's moon Europa hides a salty ocean beneath its icy crust; Io is covered in "
    "active volcanoes.",
]


def test_a_similar_pair_of_scraps_ranks_first_in_each_others_related(tmp_path: Path) -> None:
    with services(tmp_path, [], []) as stack:
        url = sqlite_url(tmp_path)
        prepare_database(url)
        web = start_web(tmp_path, stack.address, database_url=url)
        try:
            base = f"http://{web.address}"

            async def post_all() -> list[str]:
                async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                    answers = await asyncio.gather(
                        *(client.post("/api/scraps", json={"text": text}) for text in RELATED_TEXTS)
                    )
                assert all(answer.status_code == 202 for answer in answers)
                return [str(answer.json()["scrapId"]) for answer in answers]

            bread, sourdough, replication, moons = asyncio.run(post_all())
            wait_for_cards(base, [bread, sourdough, replication, moons], within=30)
            related = {
                scrap: httpx.get(f"{base}/api/scraps/{scrap}/related").json()["related"]
                for scrap in (bread, sourdough, replication, moons)
            }
            print(
                {s[:8]: [(r["scrapId"][:8], r["score"]) for r in rs] for s, rs in related.items()}
            )
            assert [r["scrapId"] for r in related[bread]][:1] == [sourdough]
            assert [r["scrapId"] for r in related[sourdough]][:1] == [bread]
            for scrap in (bread, sourdough):
                assert len(related[scrap]) == 3  # every other card, best first
                first, *others = related[scrap]
                assert all(first["score"] > other["score"] for other in others)
        finally:
            _stop(web)
