"""`--log-format json`: one JSON object per log record, one record per line, for log
collectors (Loki, Elasticsearch, Cloud Logging) that index fields instead of parsing
text. Shared by job-service and ai-gateway.

Each line holds:

- ``ts``: when, ISO-8601 UTC with milliseconds (``2026-12-01T18:19:32.123Z``);
- ``level``, ``logger``, ``service`` (``job-service``, ``ai-gateway``), ``instance``
  (which process: job-service's instance id);
- ``message``: the rendered message, passwords masked as in text logs;
- ``job_id``: when the line is about a job: the record's ``job_id`` attribute (set
  with ``extra=``), else the ``job_id=<id>`` the message names (the project's
  convention for lines about a job);
- ``trace_id``: when the record has a non-empty ``trace_id`` attribute (set by a
  logging filter while a span is current);
- ``exc``: the traceback (and stack, if asked for), as one string.

A line cannot be forged or split: JSON escapes quotes and C0 control characters, and
the characters some readers take as line breaks or choke on (DEL, C1 such as NEL,
U+2028/U+2029, lone surrogates) are written as ``\\uXXXX`` escapes too, so every line
is valid JSON that decodes back to the original text. Other non-ASCII text (Korean
inputs) stays readable as UTF-8.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from typing import Literal

from san_jobs.shared.safe_text import escape_json_unsafe, mask_secrets

LogFormat = Literal["text", "json"]
"""The values of --log-format: ``text`` (the default, for people) or ``json``."""

# A job id in a message, as the code writes it: "job_id=<uuid>".
_JOB_ID = re.compile(r"\bjob_id=([0-9A-Za-z-]+)")
# A JSON string literal for a str, quotes included, non-ASCII kept (C-accelerated).
_string: Callable[[str], str] = json.encoder.encode_basestring


def job_id_of(record: logging.LogRecord, message: str) -> str | None:
    """The job a record is about: its `job_id` attribute, else the message's
    ``job_id=<id>``; None when it names none."""
    given = record.__dict__.get("job_id")  # not getattr: a missing attribute raises inside
    if given:
        return str(given)
    if "job_id=" not in message:  # a substring test first: most lines name no job
        return None
    found = _JOB_ID.search(message)
    return found.group(1) if found else None


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring for its fields).
    `instance` is left out when empty."""

    def __init__(self, service: str, instance: str = "") -> None:
        super().__init__()
        self._service_fields = f',"service":{_string(service)}' + (
            f',"instance":{_string(instance)}' if instance else ""
        )
        self._second = -1
        self._prefix = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        # strftime once per second, not once per line: it is a good part of a line's cost.
        second = int(record.created)
        if second != self._second:
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return f"{self._prefix}.{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        message = mask_secrets(record.getMessage())
        # Written out rather than json.dumps of a dict: only the strings need JSON's
        # encoder (in C), and this is half the cost of a log line.
        line = (
            f'{{"ts":"{self.formatTime(record)}","level":{_string(record.levelname)},'
            f'"logger":{_string(record.name)}{self._service_fields},'
            f'"message":{_string(message)}'
        )
        job_id = job_id_of(record, message)
        if job_id is not None:
            line += f',"job_id":{_string(job_id)}'
        trace_id = record.__dict__.get("trace_id")
        if trace_id:
            line += f',"trace_id":{_string(str(trace_id))}'
        exc = self._exception_text(record)
        if exc:
            line += f',"exc":{_string(mask_secrets(exc))}'
        line += "}"
        # Characters JSON allows raw inside a string that some line readers would break
        # on, a UTF-8 stream could not encode, or a terminal would obey (U+202E).
        return escape_json_unsafe(line)

    def _exception_text(self, record: logging.LogRecord) -> str:
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        parts = [record.exc_text] if record.exc_text else []
        if record.stack_info:
            parts.append(self.formatStack(record.stack_info))
        return "\n".join(parts)
