"""Masking of secrets in upstream text before it is logged.

An upstream's error body may echo what it was sent (the API key, the Authorization
header), and not always as it was sent: URL-encoded (a key in a query string or a
form), JSON-escaped (``\\/`` for ``/``, ``\\u002b`` for ``+``) or HTML-escaped. What the
gateway logs of it goes through a :class:`SecretMasker` first, which masks each
secret in every one of those spellings.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Iterator
from urllib.parse import quote, quote_plus

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


_PERCENT_HEX = re.compile(r"%[0-9A-F]{2}")
_HTML_SAFE_JSON = re.compile("[<>&]")


def encoded_forms(secret: str) -> Iterator[str]:
    """``secret`` as an upstream might echo it: itself, URL-encoded (``%2F``, and
    ``%2f`` as some encoders write it; ``+`` for a space), JSON-escaped (ASCII-only or
    not, ``/`` as ``\\/`` or not) and HTML-escaped. Forms may repeat."""
    yield secret
    for url in (quote(secret, safe=""), quote_plus(secret, safe="")):
        yield url
        yield _PERCENT_HEX.sub(lambda m: m.group().lower(), url)
    for ascii_only in (True, False):
        escaped = json.dumps(secret, ensure_ascii=ascii_only)[1:-1]
        yield escaped
        yield escaped.replace("/", "\\/")
        yield re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), escaped)
    # Go's encoding/json (and other "HTML-safe" encoders) write <, > and & as \u003c...
    yield _HTML_SAFE_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(secret)[1:-1])
    yield html.escape(secret)


class SecretMasker:
    """Replaces the given secrets (in each of their :func:`encoded_forms`), and anything
    that looks like a key, by ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = {
            form
            for secret in secrets
            if len(secret) >= MIN_SECRET_CHARS
            for form in encoded_forms(secret)
        }
        # Longest first, so that a secret containing another is masked whole.
        self._secrets = sorted(forms, key=len, reverse=True)
        self.longest = len(self._secrets[0]) if self._secrets else 0
        """The length of the longest form masked (a caller cutting text masks past it)."""

    def __call__(self, text: str) -> str:
        """``text`` with every secret and key-like string masked."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        for pattern, replacement in _KEY_LIKE:
            text = pattern.sub(replacement, text)
        return text
