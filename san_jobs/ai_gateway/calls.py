"""One gateway call, whatever carried it: validate, apply the limits, ask the backend,
answer, and write the call record.

Both transports run calls through :class:`CallRunner`: a unary RPC is one call, a
StreamCalls stream runs many side by side. One path is what makes a streamed call
behave exactly as the unary RPC of its kind: the same checks and limits, the same
errors, the same record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from google.protobuf import message_factory
from google.protobuf.message import Message
from opentelemetry.trace import StatusCode, Tracer

from san_jobs.ai_gateway.bounds import MAX_ANSWER_BYTES
from san_jobs.ai_gateway.calllog import CallLog, CallRecord
from san_jobs.ai_gateway.errors import GatewayError, InternalError, MalformedResponse
from san_jobs.ai_gateway.gateway import CallInfo, Gateway
from san_jobs.ai_gateway.kind import Kind
from san_jobs.ai_gateway.metrics import CallMetrics
from san_jobs.ai_gateway.model_tokens import estimate_tokens_all
from san_jobs.ai_gateway.transport_errors import status_code_name
from san_jobs.ai_gateway.usage import Usage
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from san_jobs.shared.trace_context import context_of

logger = logging.getLogger("ai_gateway.calls")


class _Answered(Protocol):
    """What every plain result carries: the model that answered and, when the
    provider counted (or the answer is a cached one), its usage."""

    @property
    def model(self) -> str: ...

    @property
    def usage(self) -> Usage | None: ...


In = TypeVar("In")
Out = TypeVar("Out", bound=_Answered)

SERVICE = pb.DESCRIPTOR.services_by_name["AiGatewayService"]


async def answer(
    gateway: Gateway, kind: Kind[In, Out], request: Message, call: CallInfo, remaining: float | None
) -> Message:
    """``kind``'s answer to ``request``: validate, count the input's tokens, run the
    backend's handler through the gateway, build the response; raises GatewayError."""
    data = kind.validate(request)
    tokens = estimate_tokens_all(kind.input_texts(data))
    result = await gateway.run(
        call,
        tokens,
        remaining,
        lambda backend, time_left: kind.handler_of(backend)(data, time_left),
        key=data,
    )
    spent = _counted(result.usage, result.model, tokens, kind.answer_texts(result))
    # The class is found at run time, so its fields are too (typed as any Message).
    make_response: Callable[..., Message] = response_class(kind)
    return make_response(**message_fields(result), usage=spent)


@functools.cache
def response_class(kind: Kind[Any, Any]) -> type[Message]:
    """The response message of ``kind``'s RPC, as the contract declares it."""
    method = SERVICE.methods_by_name[kind.method]
    return message_factory.GetMessageClass(method.output_type)


def message_fields(result: Any) -> dict[str, Any]:
    """A plain result as the response's fields, by the contract's convention (the same
    names; a list of plain records is a repeated message), its usage left out."""
    return {
        f.name: _field_value(getattr(result, f.name))
        for f in dataclasses.fields(result)
        if f.name != "usage"
    }


def _field_value(value: Any) -> Any:
    if isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
        return [message_fields(item) for item in value]
    return value


def _counted(
    reported: Usage | None, model: str, input_tokens: int, written: Iterable[str]
) -> pb.Usage:
    """The call's usage, its duration left for CallRunner: what the backend reported
    (the provider's count, or a cached answer's mark), else the gateway's own count
    with its tokenizer (the input as the token limit counted it; the answer's texts)."""
    if reported is None:
        reported = Usage(model, input_tokens, estimate_tokens_all(written), 0.0)
    return pb.Usage(
        model=reported.model,
        input_tokens=reported.input_tokens,
        output_tokens=reported.output_tokens,
        cached=reported.cached,
    )


def _answered(metrics: CallMetrics, method: str, response: Message) -> str:
    """Count the answer's tokens (its usage, as the caller gets it); the model that
    answered, as the backend's configuration names it."""
    model = str(getattr(response, "model", ""))
    usage = getattr(response, "usage", None)
    if isinstance(usage, pb.Usage):
        metrics.answered(method, model, usage.input_tokens, usage.output_tokens, usage.cached)
    return model


def _stamp_duration(response: Message, seconds: float) -> None:
    """Set the gateway's own time on the answer's usage (every answer has one)."""
    usage = getattr(response, "usage", None)
    if isinstance(usage, pb.Usage):
        usage.duration.FromNanoseconds(round(seconds * 1e9))


class CallRunner:
    """Runs calls over a :class:`~san_jobs.ai_gateway.gateway.Gateway`, one record per call."""

    def __init__(
        self,
        gateway: Gateway,
        call_log: CallLog,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        tracer: Tracer | None = None,
        metrics: CallMetrics | None = None,
    ) -> None:
        """``tracer`` (None: tracing off): an ``ai_gateway.backend`` span for each call.
        ``metrics`` (None: none counted): every call counted (san_jobs.ai_gateway.metrics)."""
        self._gateway = gateway
        self._call_log = call_log
        self._max_answer_bytes = max_answer_bytes
        self._tracer = tracer
        self._metrics = metrics or CallMetrics()

    async def run(
        self, kind: Kind[Any, Any], request: Message, call: CallInfo, remaining: float | None
    ) -> Message:
        """The call's response, or a :class:`GatewayError` saying why there is none
        (see :meth:`_run`); in a span when tracing is on.

        The span's parent: a streamed call's own traceparent (the caller's trace; a new
        root without one), else the current span (a unary RPC's server span)."""
        if self._tracer is None:
            return await self._run(kind, request, call, remaining)
        parent = None if call.traceparent is None else context_of(call.traceparent)
        attributes: dict[str, str | int] = {"ai_gateway.method": call.method}
        if call.job_id is not None:
            attributes["job.id"] = call.job_id
        if call.attempt is not None:
            attributes["job.attempt"] = call.attempt
        with self._tracer.start_as_current_span(
            "ai_gateway.backend",
            context=parent,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                response = await self._run(kind, request, call, remaining)
            except GatewayError as err:
                span.set_status(StatusCode.ERROR, status_code_name(err))
                raise
            except asyncio.CancelledError:
                span.set_status(StatusCode.ERROR, "CANCELLED")
                raise
            usage = getattr(response, "usage", None)
            span.set_attribute("ai_gateway.model", str(getattr(response, "model", "")))
            span.set_attribute(
                "ai_gateway.cached", bool(isinstance(usage, pb.Usage) and usage.cached)
            )
            return response

    async def _run(
        self, kind: Kind[Any, Any], request: Message, call: CallInfo, remaining: float | None
    ) -> Message:
        """The call's response, or a :class:`GatewayError` saying why there is none.

        ``remaining`` is the caller's time left in seconds (None: no deadline). An
        answer too big to send is :class:`MalformedResponse` (this call's failure alone).
        An unexpected exception is logged with its traceback and becomes
        :class:`InternalError`; cancellation propagates (recorded as CANCELLED).
        """
        start = time.perf_counter()
        code = "UNKNOWN"
        model = ""  # none answered (yet)
        self._metrics.started(call.method)
        try:
            response = await answer(self._gateway, kind, request, call, remaining)
            _stamp_duration(response, time.perf_counter() - start)
            size = response.ByteSize()
            if size > self._max_answer_bytes:
                raise MalformedResponse(
                    f"the model's answer is too large: {size} bytes "
                    f"(at most {self._max_answer_bytes})"
                )
            code = "OK"
            model = _answered(self._metrics, call.method, response)
            return response
        except GatewayError as err:
            code = status_code_name(err)
            self._metrics.failed(call.method, err)
            raise
        except asyncio.CancelledError:
            # The caller went away or cancelled: the work is abandoned with the task.
            code = "CANCELLED"
            raise
        except Exception as err:
            logger.exception("%s failed unexpectedly", call.method)
            code = "INTERNAL"
            raise InternalError() from err
        finally:
            self._metrics.finished(call.method)
            self.record(call, code, start, model)

    def record(self, call: CallInfo, code: str, start: float, model: str = "") -> None:
        """Write the record of ``call``, which began at ``start`` (``perf_counter``),
        and count it; ``model``: the model that answered, if any."""
        self._metrics.ended(call.method, model, code, time.perf_counter() - start)
        self._call_log.record(
            CallRecord(
                method=call.method,
                caller=call.caller,
                client_id=call.client_label,
                job_id=call.job_id,
                attempt=call.attempt,
                code=code,
                duration_ms=(time.perf_counter() - start) * 1000,
            )
        )
