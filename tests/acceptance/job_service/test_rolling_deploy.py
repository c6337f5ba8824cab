"""A rolling deploy across a migration (issue 14, point 7), with real processes on one
PostgreSQL database: an instance of the *old* code (the last commit before issue 14,
schema 0007, taken from git history) serves jobs flowing in without a pause; the new
code's `job-service migrate` runs beside it; a new instance starts beside the old one;
both complete jobs; every job enqueued completes exactly once. Then what each version
does when it starts on a schema it was not written for.

The old code runs from `git archive` of OLD_COMMIT, imported through PYTHONPATH with
`python -P` (no current directory on sys.path), so this checkout's editable install
does not shadow it.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from san_jobs.job_service.storage.migrate import migrate
from san_jobs.job_service.storage.schema_version import (
    code_head,
    compatible_from,
    read_database_schema,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.databases import create_temp_postgres_database, drop_database, require_postgres
from tests.support.jobs_api import SAMPLE_TEXT, card_request, channel, wait_terminal
from tests.support.processes import (
    BIN,
    RunningService,
    running,
    start_gateway,
    start_job_service,
    start_service,
)
from tests.support.schema_states import FUTURE, pretend_a_newer_version_migrated

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

# The last commit before issue 14's migrations: its schema is 0007 and it migrates to
# that at every start. Pinned, so the test keeps meaning "the version before".
OLD_COMMIT = "2c7ac02"
OLD_SCHEMA = "0007"
REPO = Path(__file__).resolve().parents[3]
# The old commit's layout: its packages were top-level (job_service, san_shared, gen/).
OLD_MAIN = "import sys; sys.argv[0] = 'job-service'; from job_service.cli import main; main()"
JOBS_PER_PHASE = 40


@pytest.fixture(scope="module")
def old_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The old version's sources, checked to be what `python -P` imports with
    old_env()."""
    known = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{OLD_COMMIT}^{{commit}}"],
        capture_output=True,
    )
    if known.returncode != 0:
        # Never a skip: a rolling deploy untested is a failure, in CI above all.
        pytest.fail(
            f"commit {OLD_COMMIT} (the old version of the rolling-deploy test) is not in "
            f"this clone ({known.stderr.decode().strip()}): clone with full history "
            "(`git clone URL`, or `git fetch --unshallow` after a shallow clone)",
            pytrace=False,
        )
    tree = tmp_path_factory.mktemp("old-code")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", OLD_COMMIT, "job_service", "san_shared", "gen"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    where = subprocess.run(
        [str(BIN / "python"), "-P", "-c", "import job_service; print(job_service.__file__)"],
        env={"PYTHONPATH": f"{tree}:{tree / 'gen'}"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where == str(tree / "job_service" / "__init__.py"), where
    return tree


def old_env(tree: Path) -> dict[str, str]:
    return {"PYTHONPATH": f"{tree}:{tree / 'gen'}"}


def start_old_job_service(
    tree: Path, log_dir: Path, *args: str, gateway: str, database_url: str
) -> RunningService:
    argv = ["python", "-P", "-c", OLD_MAIN, "--listen", "127.0.0.1:0"]
    argv += ["--database-url", database_url, "--gateway", gateway, *args]
    return start_service("job-service-old", argv, log_dir, old_env(tree))


def job_service_once(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`job-service ARGS` (this checkout's) to its end: for `migrate` and refusals."""
    return subprocess.run(
        [str(BIN / "job-service"), *args], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture
def empty_database() -> Iterator[str]:
    reason = require_postgres()
    if reason is not None:
        pytest.skip(reason)
    url = create_temp_postgres_database(migrated=False)
    yield url
    drop_database(url)


def both_worked(old: RunningService, new: RunningService, job_ids: list[str]) -> bool:
    return any(completed_in(old, job_ids).values()) and any(completed_in(new, job_ids).values())


def completed_in(service: RunningService, job_ids: list[str]) -> dict[str, int]:
    """How many times the service's log says each job completed."""
    done = re.findall(r"job_id=(\S+) completed:", service.log())
    return {job_id: done.count(job_id) for job_id in job_ids}


async def test_old_and_new_instances_side_by_side_across_the_migration(
    tmp_path: Path, old_code: Path, empty_database: str
) -> None:
    url = empty_database
    ids: list[str] = []
    stubs: list[pb_grpc.JobServiceStub] = []
    stop_feeding = asyncio.Event()
    enqueued = asyncio.Condition()

    async def feed() -> None:
        """Enqueue without a pause, turn about over the instances serving."""
        while not stop_feeding.is_set():
            stub = stubs[len(ids) % len(stubs)]
            index = len(ids)
            request = card_request(f"deploy-{index}", f"{SAMPLE_TEXT} Item {index}.")
            ids.append((await stub.Enqueue(request, timeout=10)).job.id)
            async with enqueued:
                enqueued.notify_all()
            await asyncio.sleep(0.005)  # a steady stream, not a flood

    async def until_enqueued(count: int) -> None:
        async with asyncio.timeout(60), enqueued:
            await enqueued.wait_for(lambda: len(ids) >= count)

    async with AsyncExitStack() as stack:
        gateway = stack.enter_context(
            running(await asyncio.to_thread(start_gateway, tmp_path / "gw", "--backend", "instant"))
        )
        old = stack.enter_context(
            running(
                await asyncio.to_thread(
                    start_old_job_service,
                    old_code,
                    tmp_path / "old",
                    "--instance-id",
                    "old",
                    "--workers",
                    "2",
                    gateway=gateway.address,
                    database_url=url,
                )
            )
        )
        # The old version migrated an empty database to its own schema at its start.
        assert (await read_database_schema(url)).revisions == (OLD_SCHEMA,)
        stubs.append(pb_grpc.JobServiceStub(await stack.enter_async_context(channel(old.address))))
        feeder = asyncio.create_task(feed())
        try:
            await until_enqueued(JOBS_PER_PHASE)
            # The deploy's first step, while the old instance works.
            migrated = await asyncio.to_thread(job_service_once, "migrate", "--database-url", url)
            assert migrated.returncode == 0, migrated.stderr
            schema = await read_database_schema(url)
            assert schema.revisions == (code_head(),)
            assert schema.recorded_compatible_from == compatible_from(code_head())
            after_migration = len(ids)
            new = stack.enter_context(
                running(
                    await asyncio.to_thread(
                        start_job_service,
                        tmp_path / "new",
                        "--instance-id",
                        "new",
                        "--no-migrate-on-start",
                        gateway=gateway.address,
                        database_url=url,
                    )
                )
            )
            stubs.append(
                pb_grpc.JobServiceStub(await stack.enter_async_context(channel(new.address)))
            )
            await until_enqueued(after_migration + 2 * JOBS_PER_PHASE)
            # Jobs flow until each version has completed some enqueued after the
            # migration (which instance claims a job is a race each time).
            async with asyncio.timeout(60):
                while not both_worked(old, new, ids[after_migration:]):
                    await until_enqueued(len(ids) + 10)
        finally:
            stop_feeding.set()
            await feeder
        final = await wait_terminal(stubs[1], ids, timeout=60)

        # No job lost, none run twice: each COMPLETED after one attempt, one instance's.
        assert len(set(ids)) == len(ids) == len(final)
        assert {job.status for job in final.values()} == {pb.JOB_STATUS_COMPLETED}
        assert {job.attempt_count for job in final.values()} == {1}
        by_old, by_new = completed_in(old, ids), completed_in(new, ids)
        assert {job_id: by_old[job_id] + by_new[job_id] for job_id in ids} == dict.fromkeys(ids, 1)
        # Both versions did work after the migration.
        after = ids[after_migration:]
        assert any(by_old[job_id] for job_id in after), old.log_tail()
        assert any(by_new[job_id] for job_id in after), new.log_tail()

        # The old instance restarts on the new schema. Its code (from before the
        # compatibility record) asks alembic for a revision it does not know and stops:
        # exit 1, one line, nothing written.
        assert await asyncio.to_thread(old.stop) == 0, old.log_tail()
        again = await asyncio.to_thread(
            subprocess.run,
            [
                str(BIN / "python"),
                "-P",
                "-c",
                OLD_MAIN,
                "--listen",
                "127.0.0.1:0",
                "--database-url",
                url,
                "--gateway",
                gateway.address,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=old_env(old_code),
        )
        assert again.returncode == 1, again.stderr
        assert f"Can't locate revision identified by '{code_head()}'" in again.stderr
        assert again.stderr.strip().splitlines()[-1].startswith("job-service: cannot prepare")
        assert (await read_database_schema(url)).revisions == (code_head(),)


def one_line_refusal(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stderr)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("job-service: "), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in last, result.stderr


async def test_this_version_on_a_newer_or_older_schema(
    tmp_path: Path, postgres_database: str
) -> None:
    """This code as the *old* version of a later release: it runs on a newer schema
    that records it may, refuses one that does not; and as the new version, refuses
    an older schema when starts may not migrate."""
    url = postgres_database
    serve = ["--listen", "127.0.0.1:0", "--database-url", url, "--gateway", "127.0.0.1:9"]
    await pretend_a_newer_version_migrated(url, compatible_from=code_head())
    with running(
        await asyncio.to_thread(
            start_job_service, tmp_path / "compatible", gateway="127.0.0.1:9", database_url=url
        )
    ) as compatible:
        async with channel(compatible.address) as chan:
            stats = await pb_grpc.JobServiceStub(chan).GetJobStats(
                pb.GetJobStatsRequest(), timeout=10
            )
        assert stats is not None
    assert FUTURE in compatible.log()  # it says what it runs on

    await pretend_a_newer_version_migrated(url, compatible_from=FUTURE)
    one_line_refusal(
        await asyncio.to_thread(job_service_once, *serve),
        f"revision {FUTURE}, newer than this job-service",
        "start the newer job-service",
    )
    one_line_refusal(
        await asyncio.to_thread(job_service_once, "migrate", "--database-url", url),
        f"revision {FUTURE}, newer than this job-service",
        "nothing to migrate",
    )


async def test_a_start_on_an_older_schema_migrates_only_if_allowed(
    tmp_path: Path, empty_database: str
) -> None:
    """The old version's schema: with --no-migrate-on-start a start refuses it; by
    default (every revision since is expand-only) a start migrates it and serves."""
    url = empty_database
    await migrate(url, OLD_SCHEMA)
    serve = ["--listen", "127.0.0.1:0", "--database-url", url, "--gateway", "127.0.0.1:9"]
    one_line_refusal(
        await asyncio.to_thread(job_service_once, *serve, "--no-migrate-on-start"),
        f"revision {OLD_SCHEMA}, older than this job-service's {code_head()}",
        "run `job-service migrate` first",
    )
    assert (await read_database_schema(url)).revisions == (OLD_SCHEMA,)
    with running(
        await asyncio.to_thread(
            start_job_service, tmp_path / "js", gateway="127.0.0.1:9", database_url=url
        )
    ):
        assert (await read_database_schema(url)).revisions == (code_head(),)
