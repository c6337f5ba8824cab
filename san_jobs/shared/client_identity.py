"""Who a mutual-TLS client is: the names its verified certificate carries.

Both services read a caller's certificate the same way (AiGateway to admit JobService
alone, JobService where certificates stand in for tokens), so the rule lives here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ANY_NAME = "*"
"""In an allow-list, admits every certificate the CA signed (the old behaviour, on purpose)."""


def certificate_name(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """The verified client certificate's common name, else its first subject
    alternative name; None without a certificate."""
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for value in auth_context.get(key, ()):
            name = value.decode("utf-8", "replace").strip()
            if name:
                return name
    return None


@dataclass(frozen=True)
class ClientNames:
    """An allow-list of client certificate names: which of the certificates a trusted
    CA signed a service admits. Signed by the CA means the name is true, not that its
    holder may call: a CA that signs the operator's and the web product's certificates
    too would otherwise let each of them past the one client meant to call.

    Names are compared exactly (case and all) with :func:`certificate_name`.
    """

    names: frozenset[str]

    @classmethod
    def parse(cls, text: str) -> ClientNames:
        """The list of a setting, ``NAME,NAME`` (white space around a name ignored;
        ``*`` admits any name); ValueError, one line, when it names nobody or holds an
        empty entry."""
        names = [part.strip() for part in text.split(",")]
        if not any(names):
            raise ValueError("name at least one client certificate name (or * for any)")
        if not all(names):
            raise ValueError(f"an empty name in {text!r} (NAME,NAME,...)")
        return cls(frozenset(names))

    @property
    def admits_any(self) -> bool:
        """Whether every certificate of the CA is admitted (``*``)."""
        return ANY_NAME in self.names

    def admits(self, name: str) -> bool:
        """Whether a certificate named ``name`` is admitted."""
        return self.admits_any or name in self.names

    def __str__(self) -> str:
        return ",".join(sorted(self.names))
