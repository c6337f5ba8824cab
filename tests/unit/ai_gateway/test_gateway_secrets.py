"""What the gateway logs of upstream text has every key-like string masked."""

from __future__ import annotations

import pytest

from san_jobs.ai_gateway.backends.secrets import SecretMasker

CONFIGURED = "my-Configured-Key-42"


@pytest.mark.parametrize(
    ("text", "secret_part", "kept"),
    [
        (f"Incorrect API key provided: {CONFIGURED}.", CONFIGURED, "Incorrect API key provided"),
        ("key sk-proj-AbCdEf0123456789 rejected", "AbCdEf0123456789", "rejected"),
        ("Authorization: Bearer abc.DEF-123_xyz", "abc.DEF-123_xyz", "Authorization: Bearer ***"),
        ('{"api_key": "zzTopSecret99"}', "zzTopSecret99", '"api_key": "***"'),
        ("password=hunter2hunter2&x=1", "hunter2hunter2", "password=***"),
        ("token: t0k3n-value", "t0k3n-value", "token: ***"),
    ],
)
def test_key_like_strings_are_masked(text: str, secret_part: str, kept: str) -> None:
    masked = SecretMasker([CONFIGURED])(text)
    assert secret_part not in masked
    assert kept in masked


def test_plain_words_are_kept_and_tiny_secrets_do_not_mask_everything() -> None:
    mask = SecretMasker(["", "a"])
    assert mask("Rate limit reached for a model") == "Rate limit reached for a model"


def test_a_secret_containing_another_is_masked_whole() -> None:
    mask = SecretMasker(["abcd", "abcd-efgh-ijkl"])
    assert mask("got abcd-efgh-ijkl") == "got ***"
