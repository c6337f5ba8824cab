"""Secure by default beyond loopback: the one rule every server of the project
(job-service, ai-gateway, san-web) applies before it listens.

On a loopback address only this machine can call, so `make run` needs no set-up. On
any other address (a LAN address, 0.0.0.0, [::], a host name) a server starts only
with TLS and authentication, or when the operator says `--insecure` on purpose.
"""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def listen_host(listen: str) -> str:
    """The host part of HOST:PORT (IPv6 brackets removed; "" for ":PORT")."""
    host = listen.rpartition(":")[0] if ":" in listen else listen
    return host.strip("[]")


def is_loopback(listen: str) -> bool:
    """True when HOST:PORT can only be reached from this machine: a loopback
    address (127.0.0.0/8, ::1) or the name localhost. A wildcard (0.0.0.0, [::], an
    empty host) or any other name is not."""
    host = listen_host(listen).lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def exposure_problem(listen: str, *, tls: bool, authenticated: bool, insecure: bool) -> str | None:
    """Why a server must not start on `listen`, or None when it may. `tls`: it serves
    TLS; `authenticated`: it checks who calls; `insecure`: the operator's explicit
    opt-out. The reason is one line naming what is missing."""
    if insecure or is_loopback(listen) or (tls and authenticated):
        return None
    missing = [name for name, ok in (("TLS", tls), ("authentication", authenticated)) if not ok]
    return (
        f"refusing to listen on {listen} (not a loopback address) without "
        f"{' and '.join(missing)}; give them, or --insecure to accept the risk"
    )
