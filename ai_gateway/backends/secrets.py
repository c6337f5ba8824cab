"""Masking of secrets in upstream text before it is logged.

An upstream's error body may echo what it was sent (the API key, the Authorization
header). What the gateway logs of it goes through a :class:`SecretMasker` first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
# Shorter configured secrets are not masked by value: a 1-3 character "secret" would
# mask every occurrence of those letters and hide the message itself.
MIN_SECRET_CHARS = 4
# Key-like strings, whoever's they are: credentials after an auth scheme, OpenAI-style
# keys (sk-..., sk-proj-...), and values of key/token/secret/password assignments.
_KEY_LIKE: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), rf"\1 {MASK}"),
    (re.compile(r"\b(sk|pk|rk)([-_])[A-Za-z0-9_-]{4,}"), rf"\1\2{MASK}"),
    (
        re.compile(
            r"(?i)\b((?:api[-_]?key|access[-_]?token|token|secret|password)"
            r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+"
        ),
        rf"\1{MASK}",
    ),
]


class SecretMasker:
    """Replaces the given secrets, and anything that looks like a key, by ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first, so that a secret containing another is masked whole.
        self._secrets = sorted(
            {s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True
        )

    def __call__(self, text: str) -> str:
        """``text`` with every secret and key-like string masked."""
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        for pattern, replacement in _KEY_LIKE:
            text = pattern.sub(replacement, text)
        return text
