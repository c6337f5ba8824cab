"""What a caller is told when something goes wrong inside JobService (real server on
loopback, SQLite and PostgreSQL): an unexpected exception in a unary or streaming RPC
is INTERNAL "internal error" with an error id, and the ERROR log line with that id
holds the details and the stack; a value the database refuses is INVALID_ARGUMENT;
nothing of the driver, the SQL, a path or a URL reaches the caller; echoed values
are cut short."""

from __future__ import annotations

import logging
import uuid

import grpc
import pytest

from san_jobs.job_service.domain.errors import (
    FieldViolation,
    InvalidRequestError,
    JobNotFoundError,
    StorageDataError,
)
from san_jobs.job_service.transport.errors import to_status
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service
from tests.support.rich_errors import rich_error

SECRET = "boom at /srv/app/db.py postgresql://svc:S3cret@db/jobs SELECT * FROM async_jobs"


def _error_record(caplog: pytest.LogCaptureFixture, error_id: str) -> logging.LogRecord:
    records = [r for r in caplog.records if error_id in r.getMessage()]
    assert records, f"no log line names error id {error_id}"
    assert records[0].levelno == logging.ERROR
    return records[0]


async def test_unexpected_error_in_a_unary_rpc_is_internal_with_an_error_id(
    service: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken() -> None:
        raise RuntimeError(SECRET)

    monkeypatch.setattr(service.runtime.app, "stats", broken)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await service.stub.GetJobStats(pb.GetJobStatsRequest())
    error = rich_error(caught.value)
    assert error.code == grpc.StatusCode.INTERNAL  # was UNKNOWN with the exception's text
    error_id = error.metadata["errorId"]
    assert error.message == f"internal error (error id {error_id})"
    record = _error_record(caplog, error_id)
    assert record.exc_info is not None and SECRET in str(record.exc_info[1])


async def test_unexpected_error_in_a_stream_is_internal_with_an_error_id(
    service: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(_ids: object, _owner: str | None = None) -> None:
        raise KeyError(SECRET)

    monkeypatch.setattr(service.runtime.app, "load", broken)
    call = service.stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(job_ids=[str(uuid.uuid4())]))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            pass
    error = rich_error(caught.value)
    assert error.code == grpc.StatusCode.INTERNAL
    assert "S3cret" not in error.message and "SELECT" not in error.message
    _error_record(caplog, error.metadata["errorId"])


async def test_a_value_the_database_refuses_is_invalid_argument_without_driver_text(
    service: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def refused(_job_id: str, _owner: str | None = None) -> None:
        raise StorageDataError(f"database refused a value: UntranslatableCharacterError {SECRET}")

    monkeypatch.setattr(service.runtime.app, "get", refused)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await service.stub.GetJob(pb.GetJobRequest(job_id=str(uuid.uuid4())))
    error = rich_error(caught.value)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT  # was UNAVAILABLE
    assert error.reason == "VALUE_REFUSED"
    assert "Untranslatable" not in error.message and "S3cret" not in error.message
    _error_record(caplog, error.metadata["errorId"])


def test_echoed_values_are_cut_short() -> None:
    huge = "x" * 13_000_000
    not_found = to_status(JobNotFoundError(huge), "id")
    one_huge = to_status(
        InvalidRequestError([FieldViolation("job_id", f"{huge!r} is not a UUID")]), "id"
    )
    long_id = "y" * 1_000
    many = to_status(
        InvalidRequestError([FieldViolation("job_ids[0]", f"{long_id!r} is not a UUID")] * 40_000),
        "id",
    )
    for status in (not_found, one_huge, many):
        trailer = dict(status.trailing_metadata)["grpc-status-details-bin"]
        # grpc's default limit for a client's whole trailer is 8 KiB.
        assert len(trailer) + len(status.details) < 8 * 1024
    assert one_huge.details.endswith("is not a UUID")
    assert many.details.endswith("; and 39980 more")
