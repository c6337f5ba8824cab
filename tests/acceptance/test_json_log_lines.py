"""Issue 14, point 4: `--log-format json` on real job-service and ai-gateway
processes. Every line either writes (stdout and stderr) is one JSON object with the
common fields; lines about a job carry its job_id (the gateway's call lines too); a
database password never shows; a caller's control characters cannot break a line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import card_request, channel, enqueue_cards, wait_terminal
from tests.support.processes import RunningService, running, start_gateway, start_job_service

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

PASSWORD = "S3cret@Pass"  # the test server trusts local connections: any password works
COMMON = {"ts", "level", "logger", "service", "message"}


def _lines(service: RunningService) -> list[dict[str, Any]]:
    parsed = []
    for line in service.log_path.read_text().splitlines():
        try:
            fields = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(
                f"{service.name} wrote a line that is not JSON: {line!r}"
            ) from None
        assert isinstance(fields, dict) and fields.keys() >= COMMON, line
        assert fields["ts"].endswith("Z") and len(fields["ts"]) == len("2026-01-01T00:00:00.000Z")
        parsed.append(fields)
    return parsed


@pytest.mark.timeout(90)
async def test_both_services_write_one_json_object_per_line(
    postgres_database: str, tmp_path: Path
) -> None:
    url = make_url(postgres_database).set(password=PASSWORD).render_as_string(False)
    with (
        running(
            # A call takes a second: the job cancelled below is still running then.
            start_gateway(
                tmp_path, "--backend", "instant", "--fault-latency", "1", "--log-format", "json"
            )
        ) as gateway,
        running(
            start_job_service(
                tmp_path,
                "--log-format",
                "json",
                "--instance-id",
                "json-test-1",
                gateway=gateway.address,
                database_url=url,
            )
        ) as service,
    ):
        async with channel(service.address) as chan:
            stub = pb_grpc.JobServiceStub(chan)
            job_ids = await enqueue_cards(stub, 3, "json-logs")
            finished = await wait_terminal(stub, job_ids, timeout=30)
            assert {job.status for job in finished.values()} == {pb.JOB_STATUS_COMPLETED}
            # A caller's text with line breaks of every kind, in a logged value.
            request = card_request("json-logs-cancel", "A page about logs.")
            cancelled = (await stub.Enqueue(request, timeout=10)).job.id
            reason = 'x\n{"level":"ERROR","message":"FAKE"}\u2028\x85\r\x1b[2J'
            await stub.CancelJob(pb.CancelJobRequest(job_id=cancelled, reason=reason), timeout=10)
            # BatchEnqueue writes its jobs' enqueued lines together (batch_logging.py).
            batch = pb.BatchEnqueueRequest(
                requests=[card_request(f"json-logs-batch-{i}", "A page.") for i in range(3)]
            )
            answer = await stub.BatchEnqueue(batch, timeout=10)
            batched = {r.response.job.id: r.response.job.target_id for r in answer.results}

    job_lines = _lines(service)
    gateway_lines = _lines(gateway)
    raw = service.log_path.read_text() + gateway.log_path.read_text()
    for secret in (PASSWORD, "S3cret", "Pass@"):
        assert secret not in raw

    assert {line["service"] for line in job_lines} == {"job-service"}
    assert {line["instance"] for line in job_lines} == {"json-test-1"}
    assert {line["service"] for line in gateway_lines} == {"ai-gateway"}
    assert any(":***@" in line["message"] for line in job_lines)  # the URL, masked

    # Every job's enqueued and completed lines name it in job_id.
    for job_id in job_ids:
        about = [line["message"] for line in job_lines if line.get("job_id") == job_id]
        for word in ("enqueued", "completed"):
            assert any(word in message for message in about), (word, about)
    for job_id, target_id in batched.items():
        about = [line["message"] for line in job_lines if line.get("job_id") == job_id]
        assert any(f"enqueued: CARD_ANALYSIS target_id={target_id} " in m for m in about), about
    calls = [line for line in gateway_lines if line["logger"] == "ai_gateway.calls"]
    assert {line.get("job_id") for line in calls} >= set(job_ids), calls

    # The forged "line" stayed inside the cancel line's message, decoded intact.
    cancel_lines = [line for line in job_lines if line.get("job_id") == cancelled]
    assert any(line["message"].endswith(f"cancelled: {reason}") for line in cancel_lines)
    assert not [line for line in job_lines if line["message"] == "FAKE"]
