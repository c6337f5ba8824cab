"""Per-call records: one log line each, and optionally one JSON line in a file.

The JSON file is for other programs (the JobService acceptance tests count gateway
calls per job with it), so each line is written with a single unbuffered ``write`` on an
``O_APPEND`` descriptor: it is on disk when the call ends and lines from several gateway
processes sharing the file do not interleave.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("ai_gateway.calls")


@dataclass(frozen=True)
class CallRecord:
    """One finished call: ``caller`` is the authenticated identity (the key of the
    limits), ``client_id`` the caller's own ``x-client-id`` label (untrusted, or None)."""

    method: str
    caller: str
    client_id: str | None
    job_id: str | None
    attempt: int | None
    code: str
    duration_ms: float

    def to_json(self) -> str:
        """The record as one JSON line (without the newline)."""
        return json.dumps(
            {
                "method": self.method,
                "caller": self.caller,
                "client_id": self.client_id,
                "job_id": self.job_id,
                "attempt": self.attempt,
                "code": self.code,
                "duration_ms": round(self.duration_ms, 3),
            },
            ensure_ascii=False,
        )


class CallLog:
    """Writes call records to the log and, when a path is given, to a JSON-lines file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._fd: int | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(self, rec: CallRecord) -> None:
        """Log ``rec`` (one line) and append it to the file if there is one."""
        logger.info(
            "%s caller=%s client=%s job=%s attempt=%s status=%s duration_ms=%.1f",
            rec.method,
            rec.caller,
            rec.client_id or "-",
            rec.job_id or "-",
            rec.attempt if rec.attempt is not None else "-",
            rec.code,
            rec.duration_ms,
            # --log-format json shows it as the line's job_id field.
            extra={"job_id": rec.job_id} if rec.job_id else None,
        )
        if self._fd is not None:
            os.write(self._fd, (rec.to_json() + "\n").encode("utf-8"))

    def close(self) -> None:
        """Close the file, if any."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
