"""`jobsctl enqueue-file` as a real process against a real JobService (SQLite and
PostgreSQL): every kind of line counted under its line number, the plain and the
--json summary, --results, exit codes, the progress bar on a terminal, stdin and
--start-line, and a JobService that goes away mid-file."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from san_jobs.client import AsyncJobsClient, CardAnalysisInput
from tests.integration.job_service.conftest import Service
from tests.integration.job_service.scripted_gateway import Hang
from tests.support.jobs_api import list_all
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

JOBSCTL = str(Path(sys.executable).parent / "jobsctl")


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


async def jobsctl(
    target: str, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> Run:
    process = await asyncio.create_subprocess_exec(
        JOBSCTL, "--target", target, *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(stdin), 120)
    assert process.returncode is not None
    run = Run(process.returncode, out.decode(), err.decode())
    assert "Traceback" not in run.stdout + run.stderr, run
    return run


def card(target: str, **extra: object) -> str:
    return json.dumps(
        {"jobType": "JOB_TYPE_CARD_ANALYSIS", "targetId": target,
         "cardAnalysisInput": {"text": f"text of {target}"}, **extra}
    )  # fmt: skip


async def held_jobs(service: Service) -> tuple[str, str]:
    """Two active jobs (the gateway never answers): one to collide with by type and
    target ("busy"), one with request_id "key-1"."""
    service.gateway.script = lambda _job, _attempt: Hang()
    async with AsyncJobsClient(service.runtime.address) as client:
        busy = (await client.enqueue("busy", CardAnalysisInput(text="held"))).job.id
        keyed = (
            await client.enqueue("keyed", CardAnalysisInput(text="k"), request_id="key-1")
        ).job.id
    return busy, keyed


def mixed_file(path: Path, prefix: str) -> Path:
    lines = [
        "# one job per line",  # 1: skipped
        card(f"{prefix}-a"),  # 2: created
        "",  # 3: skipped
        "{not json",  # 4: invalid here, never sent
        # 5: snake_case names, job type inferred from the input: created
        json.dumps({"target_id": f"{prefix}-b", "card_analysis_input": {"text": "b"}}),
        card("keyed", requestId="key-1"),  # 6: duplicate (the request_id's job)
        card(""),  # 7: invalid at JobService: target_id
        json.dumps({"targetIdd": "typo"}),  # 8: invalid here (unknown field)
        card("busy"),  # 9: rejected: an active job for (type, "busy")
        card("busy", onDuplicate="ON_DUPLICATE_RETURN_EXISTING"),  # 10: duplicate
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


async def test_every_kind_of_line_in_the_plain_summary(service: Service, tmp_path: Path) -> None:
    busy, _ = await held_jobs(service)
    path = mixed_file(tmp_path / "jobs.jsonl", "plain")
    run = await jobsctl(service.runtime.address, "enqueue-file", str(path), "--batch-size", "3")
    assert run.code == 1, run  # some line invalid or rejected
    out = run.stdout
    assert "lines 2-10" in out
    assert "created 2, duplicate 2, invalid 3, rejected as duplicate 1" in out
    assert "  line 4: " in out and "  line 8: " in out and "targetIdd" in out
    assert "  line 7: target_id: " in out
    assert f"  line 9: existing job {busy}" in out
    assert run.stderr == ""  # no terminal: no bar, and nothing went wrong as a whole
    jobs = {j.target_id for j in await list_all(service.stub)}
    assert {"plain-a", "plain-b"} <= jobs and "typo" not in jobs


async def test_json_summary_and_results_file(service: Service, tmp_path: Path) -> None:
    busy, keyed = await held_jobs(service)
    path = mixed_file(tmp_path / "jobs.jsonl", "json")
    results = tmp_path / "results.jsonl"
    run = await jobsctl(
        service.runtime.address, "enqueue-file", str(path), "--json", "--results", str(results)
    )
    assert run.code == 1, run
    body = json.loads(run.stdout)
    counts = {k: body[k] for k in ("created", "duplicate", "invalid", "rejected", "unconfirmed")}
    assert counts == {"created": 2, "duplicate": 2, "invalid": 3, "rejected": 1, "unconfirmed": 0}
    assert body["complete"] is True and body["resumeFromLine"] is None
    assert (body["firstLine"], body["lastLine"]) == (2, 10)
    problems = {p["line"]: p for p in body["problems"]}
    assert sorted(problems) == [4, 7, 8, 9]
    assert problems[7]["status"] == "invalid" and problems[7]["message"].startswith("target_id")
    assert problems[9] == {
        "line": 9, "status": "rejected", "jobId": busy, "message": problems[9]["message"]
    }  # fmt: skip
    assert body["problemsOmitted"] == 0
    every = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["line"] for r in every] == [2, 4, 5, 6, 7, 8, 9, 10]  # in file order
    by_line = {r["line"]: r for r in every}
    assert by_line[6] == {"line": 6, "status": "duplicate", "jobId": keyed}
    assert by_line[10] == {"line": 10, "status": "duplicate", "jobId": busy}
    assert by_line[2]["status"] == "created" and len(by_line[2]["jobId"]) == 36


async def test_a_clean_file_from_stdin_resumed_at_a_line_exits_0(service: Service) -> None:
    lines = "\n".join(card(f"stdin-{i}", requestId=f"stdin-{i}") for i in range(1, 8)) + "\n"
    run = await jobsctl(
        service.runtime.address, "--json", "enqueue-file", "-", "--start-line", "3",
        "--batch-size", "2", stdin=lines.encode(),
    )  # fmt: skip
    assert run.code == 0, run
    body = json.loads(run.stdout)
    assert (body["firstLine"], body["lastLine"], body["created"]) == (3, 7, 5)
    assert {j.target_id for j in await list_all(service.stub)} == {
        f"stdin-{i}" for i in range(3, 8)
    }
    # Sent again from line 1: the keyed lines 3-7 come back as duplicates, not new jobs.
    again = await jobsctl(service.runtime.address, "enqueue-file", "-", stdin=lines.encode())
    assert again.code == 0, again
    assert "created 2, duplicate 5, invalid 0" in again.stdout


async def test_the_progress_bar_shows_on_a_terminal(service: Service, tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join([*(card(f"bar-{i}") for i in range(20)), "{bad"]) + "\n")
    # rich takes stderr for a terminal when told so (a pipe in this test).
    terminal = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "200"}
    run = await jobsctl(
        service.runtime.address, "enqueue-file", str(path), "--batch-size", "5", env=terminal
    )
    assert run.code == 1, run
    assert "20 sent · 20 created · 1 invalid · " in run.stderr, run.stderr
    assert "lines/s" in run.stderr
    assert "created 20, duplicate 0, invalid 1" in run.stdout  # the summary still on stdout


async def test_jobservice_gone_mid_file_says_where_to_resume(
    service: Service, tmp_path: Path
) -> None:
    port = int(service.runtime.address.rsplit(":", 1)[1])
    first = [card(f"gone-{i}", requestId=f"gone-{i}") for i in range(1, 3)]
    rest = [card(f"gone-{i}", requestId=f"gone-{i}") for i in range(3, 5)]
    results = tmp_path / "results.jsonl"
    with TcpProxy("127.0.0.1", port) as proxy:
        process = await asyncio.create_subprocess_exec(
            JOBSCTL, "--target", f"127.0.0.1:{proxy.port}", "enqueue-file", "-",
            "--batch-size", "2", "--json", "--results", str(results),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdin is not None
        process.stdin.write(("\n".join(first) + "\n").encode())
        await process.stdin.drain()

        def first_batch_answered() -> bool:  # jobsctl has counted lines 1 and 2
            return results.exists() and len(results.read_text().splitlines()) == 2

        await wait_until(first_batch_answered, "the first batch's answer", within=60)
        proxy.cut()  # JobService unreachable from here on
        process.stdin.write(("\n".join(rest) + "\n").encode())
        process.stdin.close()
        out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 5, (out, err)  # JobService unreachable, as jobsctl says it
    body = json.loads(out)
    assert body["complete"] is False and body["resumeFromLine"] == 3
    assert (body["created"], body["unconfirmed"]) == (2, 2)
    assert body["unconfirmedLines"] == [[3, 4]]
    assert body["error"]["code"] == "UNAVAILABLE"
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jobsctl: error: cannot reach JobService")
    assert [json.loads(r)["status"] for r in results.read_text().splitlines()] == [
        "created", "created", "unconfirmed", "unconfirmed"
    ]  # fmt: skip
    assert {j.target_id for j in await list_all(service.stub)} == {"gone-1", "gone-2"}


async def test_plain_stop_and_unreachable_at_the_start(tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(card("x") + "\n" + card("y") + "\n")
    run = await jobsctl("127.0.0.1:1", "enqueue-file", str(path))
    assert run.code == 5, run
    assert run.stderr.startswith("jobsctl: error: cannot reach JobService at 127.0.0.1:1")
    assert "unconfirmed (sent, no answer): lines 1-2" in run.stdout
    assert f"resume with: jobsctl enqueue-file {path} --start-line 1" in run.stdout


async def test_usage_errors_exit_2_in_one_line(tmp_path: Path) -> None:
    missing = await jobsctl("127.0.0.1:1", "enqueue-file", str(tmp_path / "nope.jsonl"))
    assert missing.code == 2 and missing.stdout == ""
    assert missing.stderr.startswith("jobsctl: error: cannot open ")
    assert len(missing.stderr.splitlines()) == 1
    too_big = await jobsctl("127.0.0.1:1", "enqueue-file", "-", "--batch-size", "1001")
    assert too_big.code == 2 and "at most 1000" in too_big.stderr
