"""A scripted AiGatewayService on a real loopback port, for JobService tests that
need an exact failure (a status with rich details, a hang, a slow answer) on a
chosen call. The real gateway's own behaviour is tested in its own suite and in
the acceptance tests."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from san.aigateway.v1 import ai_gateway_pb2 as gw
from san.aigateway.v1 import ai_gateway_pb2_grpc as gw_grpc


@dataclass
class Fail:
    """Answer with this status (and ErrorInfo reason / RetryInfo delay)."""

    code: grpc.StatusCode
    message: str
    reason: str = ""
    retry_delay: float | None = None


@dataclass
class Hang:
    """Never answer (until cancelled)."""


@dataclass
class Slow:
    seconds: float


Action = Fail | Hang | Slow | None


@dataclass
class ScriptedGateway(gw_grpc.AiGatewayServiceServicer):
    """`script(job_id, attempt)` decides each call; None means answer normally."""

    script: Callable[[str, int], Action] = lambda _job, _attempt: None
    calls: Counter[str] = field(default_factory=Counter)
    cancelled: list[str] = field(default_factory=list)

    async def _act(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        metadata = dict(context.invocation_metadata() or ())
        job_id = str(metadata.get("x-job-id", ""))
        attempt = int(str(metadata.get("x-attempt", "0")))
        self.calls[job_id] += 1
        action = self.script(job_id, attempt)
        try:
            if isinstance(action, Hang):
                await asyncio.sleep(3600)
            elif isinstance(action, Slow):
                await asyncio.sleep(action.seconds)
        except asyncio.CancelledError:
            self.cancelled.append(job_id)
            raise
        if isinstance(action, Fail):
            status = status_pb2.Status(code=action.code.value[0], message=action.message)
            if action.reason:
                info = any_pb2.Any()
                info.Pack(error_details_pb2.ErrorInfo(reason=action.reason, domain="aigateway.san"))
                status.details.append(info)
            if action.retry_delay is not None:
                retry = any_pb2.Any()
                delay = duration_pb2.Duration()
                delay.FromNanoseconds(int(action.retry_delay * 1e9))
                retry.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
                status.details.append(retry)
            await context.abort_with_status(rpc_status.to_status(status))

    async def AnalyzeContent(
        self, request: gw.AnalyzeContentRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gw.AnalyzeContentResponse:
        await self._act(context)
        first = request.text.split(".")[0].strip()
        return gw.AnalyzeContentResponse(
            summary=f"{first}.", tags=["scripted"], embedding=[0.6, 0.8], model="scripted"
        )

    async def GenerateTil(
        self, request: gw.GenerateTilRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gw.GenerateTilResponse:
        await self._act(context)
        body = "\n".join(f"- {n}" for n in request.notes)
        return gw.GenerateTilResponse(title=f"TIL {request.day}", body=body, model="scripted")

    async def GenerateRecall(
        self, request: gw.GenerateRecallRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gw.GenerateRecallResponse:
        await self._act(context)
        return gw.GenerateRecallResponse(
            questions=[
                gw.Question(question=f"What is {s.title}?", answer=s.text, source_index=i)
                for i, s in enumerate(request.sources)
            ],
            model="scripted",
        )


async def start_scripted_gateway(gateway: ScriptedGateway) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    gw_grpc.add_AiGatewayServiceServicer_to_server(gateway, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"
