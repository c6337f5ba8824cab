"""AiGateway's core knows no gRPC: its errors are plain Python, and only the transport
(servicer.py, stream.py, transport_errors.py, and calls.py/validation.py, where the
protobuf messages meet the core) maps them to statuses. Read from the source with
`ast`, following the project's own imports."""

from __future__ import annotations

import pytest

from tests.support.imports import ROOT, forbidden_imports, module_name

CORE = [
    "ai_gateway.gateway",
    "ai_gateway.errors",
    "ai_gateway.limits",
    "ai_gateway.faults",
    "ai_gateway.models",
    "ai_gateway.tokens",
    "ai_gateway.bounds",
    "ai_gateway.calllog",
    *(module_name(path) for path in sorted((ROOT / "ai_gateway" / "backends").rglob("*.py"))),
]


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_no_grpc_nor_protobuf(module: str) -> None:
    assert forbidden_imports(module) == []


def test_the_check_follows_imports_through_project_modules() -> None:
    # calls.py is transport-side: it reaches gRPC through the status mapping.
    assert "ai_gateway.calls -> ai_gateway.transport_errors -> grpc" in forbidden_imports(
        "ai_gateway.calls"
    )
