"""job-service's log lines: `CachedTimeFormatter` (san_jobs.shared.cached_time: one record
is one line, control characters escaped, passwords masked, a cheaper clock), or with
--log-format json san_jobs.shared.json_logs' one JSON object per line."""

from __future__ import annotations

import logging

# Shared with ai-gateway's text format; imported from here by name too.
from san_jobs.shared.cached_time import CachedTimeFormatter
from san_jobs.shared.json_logs import JsonFormatter, LogFormat

__all__ = ["SERVICE", "CachedTimeFormatter", "log_formatter"]

SERVICE = "job-service"


def log_formatter(log_format: LogFormat, instance_id: str) -> logging.Formatter:
    """The formatter of --log-format for the instance named `instance_id`."""
    if log_format == "json":
        return JsonFormatter(SERVICE, instance_id)
    return CachedTimeFormatter(
        "%(asctime)s %(levelname)s " + SERVICE + "[" + instance_id + "] %(name)s: %(message)s"
    )
