"""A small JobService on a real loopback port, over TLS, mutual TLS or plaintext, that
checks bearer tokens the way the real one does: no token or an unknown one is
UNAUTHENTICATED, a viewer may read but not cancel (PERMISSION_DENIED), both with
ErrorInfo in domain ``jobs.san``. The clients' TLS tests need nothing else of it."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.unit.clients._clients_support import make_job

TOKENS = {"operator-secret-token": "operator", "viewer-secret-token": "viewer"}


def _abort(context: grpc.ServicerContext, code: int, reason: str, message: str) -> None:
    info = error_details_pb2.ErrorInfo(reason=reason, domain="jobs.san")
    detail = any_pb2.Any()
    detail.Pack(info)
    context.abort_with_status(
        rpc_status.to_status(status_pb2.Status(code=code, message=message, details=[detail]))
    )


@dataclass
class FakeJobService(pb_grpc.JobServiceServicer):
    """Answers GetJob and CancelJob; remembers the tokens it was sent."""

    seen_tokens: list[str] = field(default_factory=list)

    def _role(self, context: grpc.ServicerContext) -> str:
        header = dict(context.invocation_metadata()).get("authorization", "")
        token = str(header).removeprefix("Bearer ")
        self.seen_tokens.append(token)
        role = TOKENS.get(token)
        if role is None:
            _abort(context, code_pb2.UNAUTHENTICATED, "UNAUTHENTICATED", "missing or bad token")
        return role or ""

    def GetJob(self, request: pb.GetJobRequest, context: grpc.ServicerContext) -> pb.GetJobResponse:
        self._role(context)
        return pb.GetJobResponse(job=make_job(pb.JOB_STATUS_COMPLETED, job_id=request.job_id))

    def CancelJob(
        self, request: pb.CancelJobRequest, context: grpc.ServicerContext
    ) -> pb.CancelJobResponse:
        if self._role(context) != "operator":
            _abort(
                context, code_pb2.PERMISSION_DENIED, "PERMISSION_DENIED",
                "role viewer may not call CancelJob",
            )  # fmt: skip
        return pb.CancelJobResponse(job=make_job(pb.JOB_STATUS_CANCELLED, job_id=request.job_id))


@dataclass
class Served:
    address: str
    service: FakeJobService


@contextmanager
def serve(certs: Path | None, *, mutual: bool = False) -> Iterator[Served]:
    """Serve on 127.0.0.1 with ``certs``' job-service certificate (plaintext when None);
    ``mutual`` also requires a client certificate signed by ``certs``' CA."""
    service = FakeJobService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_JobServiceServicer_to_server(service, server)
    if certs is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        pair = (
            (certs / "job-service-key.pem").read_bytes(),
            (certs / "job-service.pem").read_bytes(),
        )
        client_ca = (certs / "ca.pem").read_bytes() if mutual else None
        credentials = grpc.ssl_server_credentials([pair], client_ca, require_client_auth=mutual)
        port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        yield Served(f"127.0.0.1:{port}", service)
    finally:
        server.stop(None)
