"""``ai-gateway``: command-line flags over ``SAN_GATEWAY_*`` environment variables."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from pydantic import ValidationError

from ai_gateway.settings import ENV_PREFIX, GatewaySettings
from san_shared.safe_text import SafeFormatter, safe_text

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """One flag per settings field; values are checked by the settings model."""
    parser = _Parser(
        prog="ai-gateway",
        description="AiGateway: the one place in san that talks to models (gRPC).",
        epilog=f"Every flag can also be set as an environment variable {ENV_PREFIX}<FLAG>, "
        "e.g. --fault-latency as SAN_GATEWAY_FAULT_LATENCY. Flags win.",
    )
    for name, field in GatewaySettings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        default = field.default
        shown = (
            default.get_secret_value() and "***"
            if hasattr(default, "get_secret_value")
            else default
        )
        text = f"{field.description} (env {ENV_PREFIX}{name.upper()}; default {shown})"
        if field.annotation is bool:  # a switch: given means true; its variable takes true/false
            parser.add_argument(
                flag,
                dest=name,
                default=argparse.SUPPRESS,
                action="store_const",
                const=True,
                help=text,
            )
            continue
        parser.add_argument(
            flag, dest=name, default=argparse.SUPPRESS, metavar=name.upper(), help=text
        )
    return parser


def load_settings(argv: Sequence[str] | None = None) -> GatewaySettings:
    """Settings from the environment, overridden by the flags in ``argv``.

    Exits with status 2 and one line on stderr when a value is invalid.
    """
    parser = build_parser()
    flags = vars(parser.parse_args(argv))
    try:
        return GatewaySettings(**flags)
    except ValidationError as err:
        parser.error(_describe(err, set(flags)))


def _describe(err: ValidationError, given: set[str]) -> str:
    parts = []
    for problem in err.errors():
        if not problem["loc"]:  # a check across fields: its message names the flags
            parts.append(str(problem["msg"]))
            continue
        name = str(problem["loc"][0])
        where = "--" + name.replace("_", "-") if name in given else f"{ENV_PREFIX}{name.upper()}"
        parts.append(f"{where}: {problem['msg']} (got {problem.get('input')!r})")
    # The value given may be a URL with a password in it.
    return safe_text("; ".join(parts))


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop (cheaper per call than asyncio's own), unless told
    otherwise or not installed; None means asyncio's."""
    if name != "uvloop":
        return None
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a platform uvloop does not support
        return None
    return uvloop.new_event_loop


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str) -> None:
    """Log records to stderr, one line each: values from callers and from upstream
    (call ids, error texts) cannot forge a line or carry a control character, and
    URL passwords are masked (see job_service.logformat)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter(LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``ai-gateway`` console script."""
    settings = load_settings(argv)
    configure_logging(settings.log_level)
    from ai_gateway.server import serve  # after logging is set up; keeps --help fast

    try:
        with asyncio.Runner(loop_factory=_loop_factory(settings.event_loop)) as runner:
            runner.run(serve(settings))
    except (OSError, RuntimeError) as err:
        print(safe_text(f"ai-gateway: error: {err}"), file=sys.stderr)
        sys.exit(1)
