"""AiGateway's core knows no gRPC: its errors are plain Python, and only the transport
(servicer.py, stream.py, transport_errors.py, and calls.py, where the protobuf
messages meet the core) maps them to statuses; the kinds of call (kind.py, kinds/,
with their validation) read requests by attribute and build no message. Read from the source with
`ast`, following the project's own imports."""

from __future__ import annotations

import pytest

from tests.support.imports import ROOT, forbidden_imports, module_name

CORE = [
    "san_jobs.ai_gateway.gateway",
    "san_jobs.ai_gateway.errors",
    "san_jobs.ai_gateway.limits",
    "san_jobs.ai_gateway.faults",
    "san_jobs.ai_gateway.models",
    "san_jobs.ai_gateway.validation",
    "san_jobs.ai_gateway.kind",
    "san_jobs.ai_gateway.model_tokens",
    "san_jobs.ai_gateway.bounds",
    "san_jobs.ai_gateway.calllog",
    *(
        module_name(path)
        for folder in ("backends", "kinds")
        for path in sorted((ROOT / "san_jobs" / "ai_gateway" / folder).rglob("*.py"))
    ),
]


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_no_grpc_nor_protobuf(module: str) -> None:
    assert forbidden_imports(module) == []


def test_the_check_follows_imports_through_project_modules() -> None:
    # calls.py is transport-side: it reaches gRPC through the status mapping.
    assert (
        "san_jobs.ai_gateway.calls -> san_jobs.ai_gateway.transport_errors -> grpc"
        in forbidden_imports("san_jobs.ai_gateway.calls")
    )
