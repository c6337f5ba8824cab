"""san-web's log set-up: uvicorn's own format, one line per record whatever a client
sent (a request path may hold a decoded newline or ESC), passwords masked.

Colours are off: every control character in a line is escaped, uvicorn's colour
codes included, so they would show as ``\\x1b[32m``.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import uvicorn.config
from uvicorn.logging import AccessFormatter, DefaultFormatter

from san_jobs.shared.safe_text import SafeFormatter


class SafeDefaultFormatter(SafeFormatter, DefaultFormatter):
    """uvicorn's ``INFO:     message`` lines, escaped (see SafeFormatter)."""


class SafeAccessFormatter(SafeFormatter, AccessFormatter):
    """uvicorn's access lines (client, request line, status), escaped."""


def safe_log_config(log_level: str) -> dict[str, Any]:
    """uvicorn's logging config with escaping formatters, for ``uvicorn.Config(
    log_config=...)``; san-web's own loggers (and job_service's, e.g. the SQLite file
    mode warning) go to the same handler at `log_level` (a uvicorn level name)."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["formatters"]["default"].update({"()": SafeDefaultFormatter, "use_colors": False})
    config["formatters"]["access"].update({"()": SafeAccessFormatter, "use_colors": False})
    level = uvicorn.config.LOG_LEVELS.get(log_level.lower(), logging.WARNING)
    config["root"] = {"handlers": ["default"], "level": max(level, logging.DEBUG)}
    return config
