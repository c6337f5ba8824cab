"""The --otlp-endpoint setting of both services, checked when the settings are read
(a light module: the command line imports it before anything heavy)."""

from __future__ import annotations

from urllib.parse import urlsplit


def check_otlp_endpoint(value: str | None) -> str | None:
    """`value` (an OTLP gRPC collector's address) without surrounding space; ValueError
    unless it is http://HOST:PORT, https://HOST:PORT or HOST:PORT."""
    if value is None:
        return None
    text = value.strip()
    # What the exporter takes; anything else would fail only at the first export,
    # in the background, where nobody sees it.
    url = urlsplit(text if "://" in text else f"//{text}")
    problem = url.scheme not in ("", "http", "https") or not url.hostname
    try:
        url.port  # noqa: B018  # a port that is not a number raises ValueError
    except ValueError:
        problem = True
    if problem:
        raise ValueError(f"expected http://HOST:PORT or https://HOST:PORT, got {value!r}")
    return text
