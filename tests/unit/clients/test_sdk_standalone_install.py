"""`pip install san-jobs` is the SDK alone: a web backend gets `san_jobs.client` (and
its in-memory JobService for tests, `san_jobs.client.testing`) with grpcio, protobuf
and their status and common-protos packages, and nothing of the servers. Proven in a
Python where every other package is missing."""

from __future__ import annotations

import json

from packaging.utils import canonicalize_name

from tests.support.install_extras import (
    SDK_DISTRIBUTIONS,
    blocked_imports,
    requirements,
    run_without,
)

# What a web backend must not be made to install (issue 12), and the project's other
# packages: the SDK imports none of them.
MUST_NOT_NEED = frozenset(
    {
        "sqlalchemy",
        "asyncpg",
        "aiosqlite",
        "numpy",
        "starlette",
        "uvicorn",
        "alembic",
        "pydantic",
        "pydantic_settings",
        "rich",
        "httpx",
    }
)
OTHER_PROGRAMS = frozenset(
    {"san_jobs.job_service", "san_jobs.ai_gateway", "san_jobs.jobsctl", "san_jobs.web"}
)

# A JobService of a few lines in the same process: Enqueue answers with the job it
# was asked for, GetJob knows no job (a rich NOT_FOUND, as the real service sends).
SDK_CALLS = """
import asyncio
import json
import sys
from concurrent import futures

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc

from san_jobs.client import AsyncJobsClient, CardAnalysisInput, JobNotFoundError, JobsClient


class TinyJobService(pb_grpc.JobServiceServicer):
    def Enqueue(self, request, context):
        metadata = dict(context.invocation_metadata())
        job = pb.Job(
            id="0b0f6c2e-5c43-4f7b-9a53-000000000001",
            job_type=request.job_type,
            status=pb.JOB_STATUS_PENDING,
            target_id=request.target_id,
            requested_by=metadata.get("authorization", ""),
            error_message=request.request_id,
        )
        return pb.EnqueueResponse(job=job)

    def GetJob(self, request, context):
        info = error_details_pb2.ErrorInfo(
            reason="JOB_NOT_FOUND", domain="jobs.san", metadata={"jobId": request.job_id}
        )
        detail = any_pb2.Any()
        detail.Pack(info)
        status = status_pb2.Status(code=code_pb2.NOT_FOUND, message="no such job")
        status.details.append(detail)
        context.abort_with_status(rpc_status.to_status(status))


server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
pb_grpc.add_JobServiceServicer_to_server(TinyJobService(), server)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
target = f"127.0.0.1:{port}"
seen = {}
with JobsClient(target, token="t0ken", timeout=10) as client:
    job = client.enqueue("scrap-1", CardAnalysisInput(text="Some page text")).job
    seen["enqueued"] = [pb.JobType.Name(job.job_type), job.target_id, job.requested_by]
    seen["request_id_sent"] = len(job.error_message)
    try:
        client.get_job("0b0f6c2e-5c43-4f7b-9a53-000000000002")
    except JobNotFoundError as error:
        seen["not_found"] = error.job_id


async def async_get() -> str:
    async with AsyncJobsClient(target, timeout=10) as client:
        try:
            await client.get_job("0b0f6c2e-5c43-4f7b-9a53-000000000003")
        except JobNotFoundError as error:
            return error.job_id
    return "no error"


seen["async_not_found"] = asyncio.run(async_get())
server.stop(None)

from san_jobs.client.testing import FakeJobService

fake = FakeJobService(run=lambda job: pb.CardAnalysisResult(summary="s"))
with fake.client() as client:
    done = client.wait(client.enqueue("t", CardAnalysisInput(text="x")).job.id, timeout=5)
seen["fake"] = str(done.status)  # the in-memory service, and a status printing its name

try:
    import san_jobs.client.outbox
except ModuleNotFoundError as error:
    seen["outbox_needs"] = error.name
try:
    import sqlalchemy
except ModuleNotFoundError:
    seen["blocker"] = "active"
print(json.dumps(seen))
"""


def test_base_dependencies_are_exactly_what_the_sdk_needs() -> None:
    base = {canonicalize_name(requirement.name) for requirement in requirements()}
    assert base == SDK_DISTRIBUTIONS


def test_everything_the_servers_and_web_need_is_outside_the_sdk() -> None:
    # Guards the blocker below: a server package creeping into the base dependencies
    # would drop out of the blocked set and let the SDK test pass on an import of it.
    assert blocked_imports() >= MUST_NOT_NEED


def test_the_sdk_calls_jobservice_with_only_its_own_dependencies() -> None:
    done = run_without(SDK_CALLS, blocked_imports() | MUST_NOT_NEED | OTHER_PROGRAMS)

    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {
        "enqueued": ["JOB_TYPE_CARD_ANALYSIS", "scrap-1", "Bearer t0ken"],
        "request_id_sent": 36,  # a fresh UUID on every Enqueue
        "not_found": "0b0f6c2e-5c43-4f7b-9a53-000000000002",
        "async_not_found": "0b0f6c2e-5c43-4f7b-9a53-000000000003",
        "fake": "JOB_STATUS_COMPLETED",
        "outbox_needs": "sqlalchemy",  # the outbox is the `outbox` extra
        "blocker": "active",
    }
