"""JobService's domain, its worker and its update hub know no gRPC nor protobuf: the
transport (job_service/transport/) and the gateway adapter do the converting. Read
from the source with `ast`, following the project's own imports."""

from __future__ import annotations

import pytest

from tests.support.imports import ROOT, forbidden_imports, module_name

GRPC_FREE = [
    *(module_name(path) for path in sorted((ROOT / "job_service" / "domain").rglob("*.py"))),
    "job_service.worker",
    "job_service.updates",
]


@pytest.mark.parametrize("module", GRPC_FREE)
def test_imports_no_grpc_nor_protobuf(module: str) -> None:
    assert forbidden_imports(module) == []
