"""Who a client is, read the same way by both services: the names its verified
certificate carries (AiGateway admits JobService alone; JobService lets certificates
stand in for tokens), the bearer token it shows, and its address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote

_BEARER = "bearer "


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The token of the call's first ``authorization`` header: None when there is none;
    "" when it uses another scheme than Bearer (a credential, but never a valid one)."""
    for key, value in metadata or ():
        if key.lower() == "authorization" and isinstance(value, str):
            if value[: len(_BEARER)].lower() == _BEARER:
                return value[len(_BEARER) :].strip()
            return ""
    return None


def peer_host(peer: str) -> str:
    """The host part of a grpc peer string, in one spelling per address.

    "ipv4:127.0.0.1:54321" -> "127.0.0.1"; "ipv6:%5B::1%5D:54321" -> "::1" (grpc
    percent-encodes the brackets); an IPv4-mapped IPv6 address -> its IPv4 form;
    every unix-socket client -> "unix" (the local machine is one peer: grpc names
    no client path). Anything else is kept whole.
    """
    scheme, sep, rest = peer.partition(":")
    if not sep:
        return peer
    if scheme in ("unix", "unix-abstract"):
        return "unix"
    if scheme not in ("ipv4", "ipv6"):
        return peer
    host = unquote(rest).rpartition(":")[0].strip("[]")
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host or peer
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


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
