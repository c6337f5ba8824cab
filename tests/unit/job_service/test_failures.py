"""The contract's error table and the 1,000-character rule."""

from __future__ import annotations

import pytest

from san_jobs.job_service.domain.failures import (
    GatewayCallError,
    describe_gateway_error,
    truncate_error_message,
    unexpected_failure,
)


def test_message_of_exactly_1000_characters_is_kept_whole() -> None:
    message = "x" * 1000
    assert truncate_error_message(message) == message


def test_message_of_1001_characters_becomes_1000_plus_ellipsis() -> None:
    message = "a" * 999 + "bc"
    truncated = truncate_error_message(message)
    assert truncated == "a" * 999 + "b" + "..."
    assert len(truncated) == 1003


def test_korean_message_is_cut_between_syllables() -> None:
    message = "요청 시간이 초과되었습니다 " * 100  # 1,500 characters
    truncated = truncate_error_message(message)
    assert truncated.endswith("...")
    kept = truncated.removesuffix("...")
    # The cut falls between two syllables of one word ("되" | "었"): a cut by UTF-8
    # bytes (3 per syllable) or by anything but code points would land elsewhere.
    assert (message[999], message[1000]) == ("되", "었")
    assert len(kept) == 1000 and kept[-1] == "되"
    assert kept == message[:1000]


def test_short_message_untouched() -> None:
    assert truncate_error_message("Timeout: x") == "Timeout: x"


@pytest.mark.parametrize(
    ("code", "reason", "message", "prefix", "transient"),
    [
        ("DEADLINE_EXCEEDED", "", "Deadline Exceeded", "Timeout:", True),
        (
            "RESOURCE_EXHAUSTED",
            "RATE_LIMITED",
            "rate limit of 5/s",
            "Rate Limit Exceeded (Too many requests)",
            True,
        ),
        ("UNAVAILABLE", "", "failed to connect to all addresses", "AI gateway unavailable:", True),
        (
            "INVALID_ARGUMENT",
            "TOKEN_LIMIT_EXCEEDED",
            "Token limit exceeded (9000 > 8192)",
            "Token limit exceeded (9000 > 8192)",
            False,
        ),
        (
            "INTERNAL",
            "MALFORMED_RESPONSE",
            "JSON Parse Error at line 4",
            "JSON Parse Error at line 4",
            False,
        ),
        (
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
            "text: must not be blank",
            "INVALID_ARGUMENT: text",
            False,
        ),
        ("UNKNOWN", "", "boom", "UNKNOWN: boom", False),
    ],
)
def test_error_table(code: str, reason: str, message: str, prefix: str, transient: bool) -> None:
    failure = describe_gateway_error(GatewayCallError(code, reason, message, deadline_seconds=30.0))
    assert failure.message.startswith(prefix)
    assert failure.code == code
    assert failure.reason == reason
    assert failure.transient is transient


def test_timeout_names_the_deadline() -> None:
    failure = describe_gateway_error(
        GatewayCallError("DEADLINE_EXCEEDED", "", "Deadline Exceeded", deadline_seconds=2.5)
    )
    assert failure.message == "Timeout: the AI gateway did not answer within 2.5s"


def test_rate_limit_keeps_retry_delay() -> None:
    failure = describe_gateway_error(
        GatewayCallError("RESOURCE_EXHAUSTED", "RATE_LIMITED", "slow down", 7.5)
    )
    assert failure.retry_after_seconds == 7.5
    assert failure.message == "Rate Limit Exceeded (Too many requests): slow down"


def test_long_gateway_message_is_truncated() -> None:
    failure = describe_gateway_error(GatewayCallError("UNAVAILABLE", "", "y" * 5000))
    assert len(failure.message) == 1003
    assert failure.message.startswith("AI gateway unavailable: yyy")


def test_unexpected_failure_is_final() -> None:
    failure = unexpected_failure("0123abcd")
    assert failure.transient is False
    assert failure.message == "Internal error in the job service (error id 0123abcd)"


def test_resource_exhausted_without_rate_limit_details_is_not_called_a_rate_limit() -> None:
    failure = describe_gateway_error(
        GatewayCallError("RESOURCE_EXHAUSTED", "", "received message larger than max")
    )
    assert failure.message == "RESOURCE_EXHAUSTED: received message larger than max"
    assert failure.transient
