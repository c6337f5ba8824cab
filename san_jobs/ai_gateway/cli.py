"""``ai-gateway``: command-line flags over ``SAN_GATEWAY_*`` environment variables.

Every flag is a field of `GatewaySettings` (san_jobs.shared.cli_settings derives them); a
bad value is one line on stderr and exit code 2.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Sequence

from san_jobs.ai_gateway.settings import ENV_PREFIX, GatewaySettings
from san_jobs.shared.cached_time import CachedTimeFormatter
from san_jobs.shared.cli_settings import SettingsParser, settings_of
from san_jobs.shared.event_loop import run
from san_jobs.shared.json_logs import JsonFormatter, LogFormat
from san_jobs.shared.safe_text import safe_text
from san_jobs.shared.trace_logging import install_trace_ids


def build_parser() -> SettingsParser:
    """One flag per settings field; values are checked by the settings model."""
    return SettingsParser(
        prog="ai-gateway",
        description="AiGateway: the one place in san that talks to models (gRPC).",
        epilog=f"Every flag can also be set as an environment variable {ENV_PREFIX}<FLAG>, "
        "e.g. --fault-latency as SAN_GATEWAY_FAULT_LATENCY. Flags win.",
        settings=GatewaySettings,
    )


def load_settings(argv: Sequence[str] | None = None) -> GatewaySettings:
    """Settings from the environment, overridden by the flags in ``argv``.

    Exits with status 2 and one line on stderr when a value is invalid.
    """
    return settings_of(build_parser().parse_args(argv), GatewaySettings)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str, log_format: LogFormat = "text") -> None:
    """Log records to stderr, one line each (text, or with `log_format` json one JSON
    object, san_jobs.shared.json_logs): values from callers and from upstream (call ids,
    error texts) cannot forge a line or carry a control character, and URL passwords
    are masked (san_jobs.shared.cached_time)."""
    handler = logging.StreamHandler(sys.stderr)
    install_trace_ids(handler)  # record.trace_id, for either format
    if log_format == "json":
        # The gateway has no instance id setting: host and process tell instances apart.
        handler.setFormatter(JsonFormatter("ai-gateway", f"{socket.gethostname()}-{os.getpid()}"))
    else:
        # One call-log line per call: strftime once a second, not once a line.
        handler.setFormatter(CachedTimeFormatter(LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``ai-gateway`` console script."""
    settings = load_settings(argv)
    configure_logging(settings.log_level, settings.log_format)
    # After logging is set up; keeps --help fast.
    from san_jobs.ai_gateway.server import serve
    from san_jobs.shared.grpc_server import StartupError

    try:
        run(serve(settings), settings.event_loop)
    except (OSError, StartupError) as err:
        print(safe_text(f"ai-gateway: error: {err}"), file=sys.stderr)
        sys.exit(1)
