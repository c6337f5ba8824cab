"""san-web's flags about who may use it: ``--auth``, ``--allowed-hosts`` and the login
rate limit, each with its ``SAN_WEB_*`` environment variable."""

from __future__ import annotations

import argparse
import os
from typing import Any

from clients.web._auth import AuthMode, AuthSettings
from clients.web._login_throttle import (
    DEFAULT_MAX_FAILURES_PER_ADDRESS,
    DEFAULT_MAX_FAILURES_PER_USER,
    DEFAULT_WINDOW_SECONDS,
    LoginThrottle,
)
from clients.web._security_headers import default_allowed_hosts
from san_shared.exposure import is_loopback


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def add_auth_arguments(parser: argparse.ArgumentParser) -> None:
    """``--auth``, ``--allowed-hosts``, ``--login-max-failures(-per-address)``."""
    env = os.environ.get
    parser.add_argument(
        "--auth", choices=("off", "password"), default=env("SAN_WEB_AUTH") or None,
        help="off: no login, one shared space (the default on a loopback address); "
        "password: users log in (the default on any other address; add them with "
        "`san-web users create NAME`) [env SAN_WEB_AUTH]",
    )  # fmt: skip
    parser.add_argument(
        "--allowed-hosts", default=env("SAN_WEB_ALLOWED_HOSTS") or None, metavar="NAMES",
        help="comma-separated Host names san-web answers to (others get 421); "
        "'*.example.com' allows names under it, '*' any (default: the listen address, "
        "localhost, 127.0.0.1, ::1) [env SAN_WEB_ALLOWED_HOSTS]",
    )  # fmt: skip
    parser.add_argument(
        "--login-max-failures", type=_positive_int,
        default=env("SAN_WEB_LOGIN_MAX_FAILURES") or str(DEFAULT_MAX_FAILURES_PER_USER),
        metavar="N",
        help="failed logins of one user name within 15 minutes before its logins get 429 "
        f"(default {DEFAULT_MAX_FAILURES_PER_USER}) [env SAN_WEB_LOGIN_MAX_FAILURES]",
    )  # fmt: skip
    parser.add_argument(
        "--login-max-failures-per-address", type=_positive_int,
        default=env("SAN_WEB_LOGIN_MAX_FAILURES_PER_ADDRESS")
        or str(DEFAULT_MAX_FAILURES_PER_ADDRESS),
        metavar="N",
        help="failed logins from one client address within 15 minutes before its logins "
        f"get 429 (default {DEFAULT_MAX_FAILURES_PER_ADDRESS}) "
        "[env SAN_WEB_LOGIN_MAX_FAILURES_PER_ADDRESS]",
    )  # fmt: skip


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
            max_failures_per_user=args.login_max_failures,
            max_failures_per_address=args.login_max_failures_per_address,
            window=DEFAULT_WINDOW_SECONDS,
        ),
    }
