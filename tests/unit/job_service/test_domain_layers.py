"""JobService's domain, its worker, its update hub and the schedules' application know
no gRPC nor protobuf: the transport (san_jobs/job_service/transport/) and the gateway
adapter do the converting. Read from the source with `ast`, following the project's own
imports."""

from __future__ import annotations

import pytest

from tests.support.imports import ROOT, forbidden_imports, module_name

GRPC_FREE = [
    *(
        module_name(path)
        for path in sorted((ROOT / "san_jobs" / "job_service" / "domain").rglob("*.py"))
    ),
    "san_jobs.job_service.worker",
    "san_jobs.job_service.updates",
    "san_jobs.job_service.schedule_app",
]


@pytest.mark.parametrize("module", GRPC_FREE)
def test_imports_no_grpc_nor_protobuf(module: str) -> None:
    assert forbidden_imports(module) == []
