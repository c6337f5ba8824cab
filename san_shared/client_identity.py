"""Who a mutual-TLS client is: the names its verified certificate carries.

Both services read a caller's certificate the same way (AiGateway to admit JobService
alone, JobService where certificates stand in for tokens), so the rule lives here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def certificate_name(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """The verified client certificate's common name, else its first subject
    alternative name; None without a certificate."""
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for value in auth_context.get(key, ()):
            name = value.decode("utf-8", "replace").strip()
            if name:
                return name
    return None
