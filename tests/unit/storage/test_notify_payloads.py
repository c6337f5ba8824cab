"""The notification format (storage/notify.py): what its one reader takes, and the size
budget of the SQL encoder (the payloads the real statements send are checked against
PostgreSQL in tests/integration/storage/test_store_notifications.py)."""

from __future__ import annotations

import uuid

import pytest

from san_jobs.job_service.domain.model import JobStatus
from san_jobs.job_service.storage.notify import (
    FIELD_SEPARATOR,
    ID_SEPARATOR,
    IDS_PER_NOTIFICATION,
    MAX_PAYLOAD_BYTES,
    parse_payload,
    payload_prefix,
)


def test_a_payload_reads_as_origin_status_and_ids() -> None:
    assert payload_prefix("inst-1") == "inst-1|"
    assert parse_payload("inst-1|PENDING|a,c") == ("inst-1", "PENDING", ["a", "c"])
    assert parse_payload("inst-1|FAILED|b") == ("inst-1", "FAILED", ["b"])


def test_an_empty_id_list_reads_as_no_ids() -> None:
    assert parse_payload("inst-1|PENDING|") == ("inst-1", "PENDING", [])


@pytest.mark.parametrize("payload", ["", "inst-1", "inst-1|PENDING"])
def test_a_payload_without_three_fields_is_a_value_error(payload: str) -> None:
    # The listener logs and skips such a notice (PgChangeListener._dispatch).
    with pytest.raises(ValueError, match="values to unpack"):
        parse_payload(payload)


def test_a_full_piece_stays_below_the_limit() -> None:
    instance_id = "i" * 200  # the longest a store takes
    longest_status = max(len(s.value) for s in JobStatus)
    ids = [str(uuid.uuid4()) for _ in range(IDS_PER_NOTIFICATION)]
    size = (
        len(payload_prefix(instance_id).encode())
        + longest_status
        + len(FIELD_SEPARATOR)
        + len(ID_SEPARATOR.join(ids).encode())
    )
    assert size < MAX_PAYLOAD_BYTES
