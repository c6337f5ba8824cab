"""The API key is masked in every spelling an upstream may echo it in (URL-encoded,
JSON-escaped, HTML-escaped), and before the logged detail is cut (a key across the cut
would leave its head unmasked)."""

from __future__ import annotations

import logging
import re
from urllib.parse import quote, quote_plus

import httpx
import pytest

from san_jobs.ai_gateway.backends import secrets
from san_jobs.ai_gateway.backends.openai import OpenAIBackend
from san_jobs.ai_gateway.backends.secrets import SecretMasker
from san_jobs.ai_gateway.errors import BackendUnavailable

KEY = "plain/Secret+0123456789=xyz&<ok>"
ECHOES = [
    quote(KEY, safe=""),  # a query string
    re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quote(KEY, safe="")),  # %2f
    quote_plus(KEY),  # a form
    KEY.replace("/", "\\/"),  # JSON with "\/"
    "plain/Secret+0123456789=xyz\\u0026\\u003cok\\u003e",  # "HTML-safe" JSON (Go)
    "plain/Secret+0123456789=xyz&amp;&lt;ok&gt;",  # HTML
]


@pytest.mark.parametrize("echo", ECHOES)
def test_each_encoded_echo_is_masked(echo: str) -> None:
    assert SecretMasker([KEY])(f"echo: {echo} end") == "echo: *** end"


def test_encoded_forms_cover_url_json_and_html() -> None:
    forms = set(secrets.encoded_forms('a/b+c d<e>&"é'))
    assert {
        "a%2Fb%2Bc%20d%3Ce%3E%26%22%C3%A9",
        "a%2fb%2bc%20d%3ce%3e%26%22%c3%a9",
        "a%2Fb%2Bc+d%3Ce%3E%26%22%C3%A9",
        'a/b+c d<e>&\\"\\u00e9',
        'a\\/b+c d<e>&\\"\\u00e9',
        'a/b+c d<e>&\\"\\u00E9',
        'a/b+c d<e>&\\"é',
        'a/b+c d\\u003ce\\u003e\\u0026\\"\\u00e9',
        "a/b+c d&lt;e&gt;&amp;&quot;é",
    } <= forms


def test_a_key_across_the_cut_of_the_logged_detail_is_masked_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = "plain-Secret-0123456789xyz"
    backend = OpenAIBackend(
        base_url="http://127.0.0.1:9/v1",
        api_key=key,
        chat_model="chat",
        embedding_model="embed",
        max_input_tokens=100,
    )
    # The detail logged is cut to 300 characters: here the key starts at 291.
    body = "x" * 290 + " " + key + " and more words after it"
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    with pytest.raises(BackendUnavailable):
        backend._raise_for_status(httpx.Response(401, text=body, request=request), [])
    logged = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "x" * 290 + " ***" in logged
    assert key[:6] not in logged
