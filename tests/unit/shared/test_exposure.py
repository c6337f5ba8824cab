"""The secure-by-default rule every server applies before listening."""

from __future__ import annotations

import pytest

from san_jobs.shared.exposure import exposure_problem, is_loopback


@pytest.mark.parametrize(
    "listen",
    ["127.0.0.1:50051", "127.5.6.7:0", "[::1]:50051", "localhost:8000", "LOCALHOST:1"],
)
def test_loopback_addresses(listen: str) -> None:
    assert is_loopback(listen)


@pytest.mark.parametrize(
    "listen",
    ["0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.5:50051", "[fe80::1]:1", "db.example:5"],
)
def test_addresses_others_can_reach(listen: str) -> None:
    assert not is_loopback(listen)


def test_loopback_needs_nothing() -> None:
    assert exposure_problem("127.0.0.1:1", tls=False, authenticated=False, insecure=False) is None


def test_beyond_loopback_needs_tls_and_authentication_or_insecure() -> None:
    problem = exposure_problem("0.0.0.0:1", tls=False, authenticated=False, insecure=False)
    assert problem is not None and "without TLS and authentication" in problem
    assert "--insecure" in problem and "\n" not in problem
    only_tls = exposure_problem("0.0.0.0:1", tls=True, authenticated=False, insecure=False)
    assert only_tls is not None and "without authentication" in only_tls
    assert exposure_problem("0.0.0.0:1", tls=True, authenticated=True, insecure=False) is None
    assert exposure_problem("0.0.0.0:1", tls=False, authenticated=False, insecure=True) is None
