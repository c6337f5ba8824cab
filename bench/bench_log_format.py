"""The cost of a log line: --log-format text (CachedTimeFormatter) against json
(san_jobs.shared.json_logs.JsonFormatter), formatting the lines job-service writes for
every job (enqueued, claimed, completed), and one with a traceback.

Formatting only (no stream write, which costs the same for both): records are made
once and formatted again and again, the clock moving so the per-second time cache is
exercised as in a running service. Prints lines per second and microseconds per
line for each format, the median of several rounds.

Usage: python bench/bench_log_format.py [--lines N] [--rounds R]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from san_jobs.job_service.logformat import log_formatter

JOB_ID = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
TEMPLATES = [
    ("job_service.app", "job_id=%s enqueued: %s target_id=%s by %s",
     (JOB_ID, "CARD_ANALYSIS", "card-123", "web")),
    ("job_service.worker", "job_id=%s claimed: %s attempt %d/%d",
     (JOB_ID, "CARD_ANALYSIS", 1, 3)),
    ("job_service.worker", "job_id=%s completed: %s attempt %d/%d, gateway call %.0f ms",
     (JOB_ID, "CARD_ANALYSIS", 1, 3, 412.3)),
]  # fmt: skip


def _records(lines: int) -> list[logging.LogRecord]:
    start = time.time()
    records = []
    for index in range(lines):
        name, message, args = TEMPLATES[index % len(TEMPLATES)]
        record = logging.LogRecord(name, logging.INFO, "", 0, message, args, None)
        record.created = start + index * 0.0005  # 2,000 lines a second
        record.msecs = (record.created - int(record.created)) * 1000
        records.append(record)
    return records


def _traceback_record() -> logging.LogRecord:
    try:
        raise ValueError("boom")
    except ValueError as error:
        record = logging.LogRecord(
            "job_service.worker", logging.ERROR, "", 0, "job_id=%s: unexpected error",
            (JOB_ID,), (type(error), error, error.__traceback__),
        )  # fmt: skip
    return record


def _rate(formatter: logging.Formatter, records: list[logging.LogRecord]) -> float:
    started = time.perf_counter()
    for record in records:
        formatter.format(record)
    return len(records) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    records = _records(options.lines)
    with_traceback = [_traceback_record() for _ in range(max(1, options.lines // 20))]
    print(f"{options.lines} job lines per round, median of {options.rounds} rounds")
    formatters = {kind: log_formatter(kind, "host-1234-abcdef") for kind in ("text", "json")}
    rates: dict[str, list[float]] = {kind: [] for kind in formatters}
    for _ in range(options.rounds):  # alternating, so both see the same machine
        for kind, formatter in formatters.items():
            rates[kind].append(_rate(formatter, records))
    for kind, formatter in formatters.items():
        rate = statistics.median(rates[kind])
        for record in with_traceback:  # exc_text is cached on the record: format anew
            record.exc_text = None
        tb_rate = _rate(formatter, with_traceback)
        print(
            f"{kind:>4}: {rate:>10,.0f} lines/s  {1e6 / rate:5.2f} µs/line"
            f"   (with a traceback: {1e6 / tb_rate:5.1f} µs/line)"
        )


if __name__ == "__main__":
    main()
