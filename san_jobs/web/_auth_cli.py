"""What san-web's flags about who may use it mean: ``--auth`` resolved against the
listen address, ``--allowed-hosts`` and the login rate limit turned into
``create_app``'s arguments (the flags themselves are `WebSettings` fields)."""

from __future__ import annotations

import argparse
from typing import Any

from san_jobs.shared.exposure import is_loopback
from san_jobs.web._auth import AuthMode, AuthSettings
from san_jobs.web._login_throttle import DEFAULT_WINDOW_SECONDS, LoginThrottle
from san_jobs.web._security_headers import default_allowed_hosts


def resolve_auth_mode(chosen: str | None, listen: str) -> AuthMode:
    """``--auth`` as given, else off on a loopback address and password beyond it."""
    if chosen == "password" or (chosen is None and not is_loopback(listen)):
        return "password"
    return "off"


def auth_options(args: argparse.Namespace, listen_host: str, *, tls: bool) -> dict[str, Any]:
    """``create_app``'s keyword arguments for these flags (``args.auth`` resolved)."""
    allowed = (
        [name.strip() for name in args.allowed_hosts.split(",") if name.strip()]
        if args.allowed_hosts
        else default_allowed_hosts(listen_host)
    )
    return {
        "auth": AuthSettings(mode=args.auth, secure_cookie=tls),
        "allowed_hosts": allowed,
        "login_throttle": LoginThrottle(
            free_failures=args.login_max_failures,
            max_failures_per_address=args.login_max_failures_per_address,
            window=DEFAULT_WINDOW_SECONDS,
        ),
    }
