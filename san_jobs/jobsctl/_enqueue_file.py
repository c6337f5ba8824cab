"""``jobsctl enqueue-file FILE.jsonl``: store one job per line with BatchEnqueue.

Each line is an EnqueueRequest in proto JSON (lowerCamel or snake_case names, as
``json_format.Parse`` reads them), e.g.
``{"jobType": "JOB_TYPE_CARD_ANALYSIS", "targetId": "scrap-1", "cardAnalysisInput":
{"text": "..."}, "requestId": "scrap-1@2025-03-01"}``; ``jobType`` may be left out
when the input says it. Blank lines and lines starting with ``#`` are skipped. A line
that does not parse is invalid here and never sent.

The file is read as it is sent: ``IN_FLIGHT`` batches at most are on their way while
the next one is read, so a file of millions of lines is never held whole, and the
answers are counted in line order. When a batch's call fails as a whole (JobService
gone, ...), reading stops; the summary says which lines are confirmed, which were sent
without an answer ("unconfirmed": stored or not, nobody knows) and the ``--start-line``
to resume from.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from google.protobuf import json_format

from san_jobs.client import EnqueueOutcome, JobsClient, JobsError
from san_jobs.jobsctl import _enqueue_tally as tally_
from san_jobs.jobsctl import _render
from san_jobs.jobsctl._values import parse_priority, positive_int
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

HELP = "store one job per line of a JSON Lines file (EnqueueRequest in proto JSON), in batches"
IN_FLIGHT = 3
"""Batches sent and not yet answered at most: enough to keep JobService busy while
the next batch is read, few enough that memory stays bounded."""
DEFAULT_BATCH_SIZE = 500
# The priority of the lines that give none (--priority): the least urgent.
FILE_PRIORITY = 5
MAX_BATCH_SIZE = 1_000

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

Explain = Callable[[JobsError], tuple[str, int]]
"""jobsctl's one-line message and exit code for a JobService error."""


def _batch_size(text: str) -> int:
    value = positive_int(text)
    if value > MAX_BATCH_SIZE:
        raise argparse.ArgumentTypeError(f"at most {MAX_BATCH_SIZE} (BatchEnqueue's bound)")
    return value


def add_parser(commands: Any) -> None:
    """Add ``enqueue-file`` to jobsctl's sub-commands (argparse's subparsers)."""
    parser = commands.add_parser("enqueue-file", help=HELP, description=HELP)
    parser.add_argument("file", metavar="FILE", help="the JSON Lines file; - reads stdin")
    parser.add_argument(
        "--batch-size", type=_batch_size, default=DEFAULT_BATCH_SIZE, metavar="N",
        help=f"lines per BatchEnqueue call, 1 to {MAX_BATCH_SIZE} (default {DEFAULT_BATCH_SIZE})",
    )  # fmt: skip
    # A file is bulk work (a nightly fan-out): by default it waits behind what a
    # person asked for (priority 1-3).
    parser.add_argument(
        "--priority", type=parse_priority, default=FILE_PRIORITY, metavar="N",
        help=f"the priority of the lines that give none, 1 (most urgent) to 5"
        f" (default {FILE_PRIORITY})",
    )  # fmt: skip
    parser.add_argument(
        "--start-line", type=positive_int, default=1, metavar="N",
        help="skip the lines before line N (to resume after a stop)",
    )  # fmt: skip
    parser.add_argument(
        "--results", type=Path, default=None, metavar="PATH",
        help="write every line's outcome to PATH as JSON Lines (line, status, jobId, message)",
    )  # fmt: skip
    # SUPPRESS, as jobsctl's other --json flags: it may go before or after the command.
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS,
        help="print one JSON object (counts, problem lines, resume line) for scripts",
    )  # fmt: skip


@dataclass
class Batch:
    """Consecutive lines of the file: the parsed requests and the lines that did not
    parse, each with its line number, in file order."""

    lines: list[tuple[int, str | None]] = field(default_factory=list)  # (line, parse error)
    requests: list[pb.EnqueueRequest] = field(default_factory=list)
    end_offset: int = 0  # bytes read through its last line

    @property
    def first_line(self) -> int:
        return self.lines[0][0]

    @property
    def request_lines(self) -> list[int]:
        return [line for line, problem in self.lines if problem is None]


def parse_line(raw: bytes) -> pb.EnqueueRequest | str | None:
    """The request on one line, the reason it is invalid, or None for a line to skip."""
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as error:
        return f"not UTF-8 (byte {error.start + 1})"
    if not text or text.startswith("#"):
        return None
    try:
        return json_format.Parse(text, pb.EnqueueRequest())
    except json_format.ParseError as error:
        return str(error)


def read_batches(
    stream: IO[bytes], start_line: int, batch_size: int, priority: int = 0
) -> Iterator[Batch]:
    """The file's lines from ``start_line`` on, ``batch_size`` lines at most per batch
    (skipped lines count nowhere; invalid ones count, so a batch stays small). A line
    that gives no priority gets ``priority`` (0: JobService's default)."""
    batch = Batch()
    offset = 0
    for number, raw in enumerate(stream, 1):
        offset += len(raw)
        if number < start_line:
            continue
        parsed = parse_line(raw)
        if parsed is None:
            continue
        if isinstance(parsed, str):
            batch.lines.append((number, parsed))
        else:
            if not parsed.priority:
                parsed.priority = priority
            batch.lines.append((number, None))
            batch.requests.append(parsed)
        batch.end_offset = offset
        if len(batch.lines) == batch_size:
            yield batch
            batch = Batch()
    if batch.lines:
        yield batch


class _Display:
    """The progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, total_bytes: int | None, tally: tally_.Tally) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        console = _render.make_console(stderr=True)
        self._tally = tally
        self._started = time.monotonic()
        self.sent = 0
        self._progress = Progress(
            BarColumn(bar_width=16),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,
        )
        self._task = self._progress.add_task("lines", total=total_bytes, counts=self._counts())

    def _counts(self) -> str:
        # Short enough for 80 columns: problem counts only once there are some.
        counts = self._tally.counts
        answered = counts.total() - counts[tally_.UNCONFIRMED]
        rate = answered / max(time.monotonic() - self._started, 1e-9)
        parts = [f"{self.sent:,} sent", f"{counts[tally_.CREATED]:,} created"]
        for status in (tally_.DUPLICATE, *tally_.PROBLEMS, tally_.UNCONFIRMED):
            if counts[status]:
                parts.append(f"{counts[status]:,} {status}")
        return " · ".join([*parts, f"{rate:,.0f} lines/s"])

    def update(self, done_bytes: int | None = None) -> None:
        self._progress.update(self._task, completed=done_bytes, counts=self._counts())

    def __enter__(self) -> _Display:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.update()
        self._progress.stop()

    @property
    def seconds(self) -> float:
        return time.monotonic() - self._started


def _open(path: str, stack: ExitStack) -> tuple[IO[bytes], int | None]:
    """The input stream and its size when it is a regular file (for the bar)."""
    if path == "-":
        return sys.stdin.buffer, None
    stream = stack.enter_context(open(path, "rb"))  # noqa: SIM115 (closed by the stack)
    info = os.fstat(stream.fileno())
    return stream, info.st_size if stat.S_ISREG(info.st_mode) else None


def cmd_enqueue_file(client: JobsClient, args: argparse.Namespace, explain: Explain) -> int:
    source = args.file
    with ExitStack() as stack:
        try:
            stream, size = _open(args.file, stack)
            results = None
            if args.results is not None:
                results = stack.enter_context(args.results.open("w", encoding="utf-8"))
        except OSError as error:
            name = error.filename or args.file
            sys.stderr.write(
                f"jobsctl: error: cannot open {_render.plain(str(name))}: {error.strerror} "
                "(see 'jobsctl enqueue-file --help')\n"
            )
            return EXIT_USAGE
        tally = tally_.Tally(results=results)
        display = stack.enter_context(_Display(size, tally))
        sender = _Sender(client, tally, display, explain)
        stop, code = sender.run(
            read_batches(stream, args.start_line, args.batch_size, args.priority)
        )
        seconds = display.seconds
    if stop is not None:
        sys.stderr.write(f"jobsctl: error: {_render.plain(stop.message)}\n")
    if args.json:
        _render.print_json(tally_.summary_dict(tally, source, stop))
    else:
        for line in tally_.summary_lines(tally, source, stop, seconds):
            print(line, flush=True)
    if code is None:
        code = EXIT_PROBLEMS if tally.problem_count else EXIT_OK
    return code


class _Sender:
    """Sends batches in the background, IN_FLIGHT at most, and counts each answer as
    it comes, in file order (so the bar and --results move while stdin is slow);
    stops reading at the first call that fails as a whole."""

    def __init__(
        self, client: JobsClient, tally: tally_.Tally, display: _Display, explain: Explain
    ) -> None:
        self.client = client
        self.tally = tally
        self.display = display
        self.explain = explain
        self.stop: tally_.Stop | None = None
        self.code: int | None = None
        # Answers are counted by whichever thread sees them first: the head of the
        # queue only, under the lock, so the tally stays in line order.
        self._lock = threading.Lock()
        self._in_flight: deque[tuple[Batch, Future[list[EnqueueOutcome]]]] = deque()

    def _send(self, batch: Batch) -> list[EnqueueOutcome]:
        if not batch.requests:
            return []
        return self.client.enqueue_many(batch.requests, batch_size=len(batch.requests))

    def _settle_answered(self) -> None:
        with self._lock:
            while self._in_flight and self._in_flight[0][1].done():
                self._settle(*self._in_flight.popleft())

    def run(self, batches: Iterator[Batch]) -> tuple[tally_.Stop | None, int | None]:
        pool = ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="enqueue-file")
        next_line = 1
        try:
            for batch in batches:
                next_line = batch.lines[-1][0] + 1
                future = pool.submit(self._send, batch)
                with self._lock:
                    self._in_flight.append((batch, future))
                    self.display.sent += len(batch.requests)
                future.add_done_callback(lambda _: self._settle_answered())
                while len(self._in_flight) >= IN_FLIGHT:
                    wait([self._in_flight[0][1]])
                    self._settle_answered()
                if self.stop is not None:
                    break
            wait([future for _, future in self._in_flight])
            self._settle_answered()
        except KeyboardInterrupt:
            with self._lock:
                resume = self._in_flight[0][0].first_line if self._in_flight else next_line
                while self._in_flight:
                    self._record_unanswered(self._in_flight.popleft()[0])
                self.stop = self.stop or tally_.Stop("interrupted", resume)
                self.code = EXIT_INTERRUPTED
        except OSError as error:  # the file or stdin could not be read on
            self.stop = tally_.Stop(f"cannot read on: {error}", next_line)
            self.code = EXIT_USAGE
        finally:
            pool.shutdown(wait=self.code != EXIT_INTERRUPTED, cancel_futures=True)
        return self.stop, self.code

    def _settle(self, batch: Batch, answer: Future[list[EnqueueOutcome]]) -> None:
        try:
            outcomes: list[EnqueueOutcome] | None = answer.result()
        except JobsError as error:
            outcomes = None
            if self.stop is None:
                message, code = self.explain(error)
                self.stop = tally_.Stop(message, batch.first_line, error)
                self.code = code
        if outcomes is None:
            self._record_unanswered(batch)
        else:
            replies = iter(outcomes)
            for line, problem in batch.lines:
                if problem is not None:
                    self.tally.add(tally_.LineOutcome(line, tally_.INVALID, problem))
                else:
                    self.tally.add(tally_.from_outcome(line, next(replies)))
        self.display.update(batch.end_offset)

    def _record_unanswered(self, batch: Batch) -> None:
        self.tally.unconfirmed_range(batch.request_lines)
        for line, problem in batch.lines:
            if problem is not None:
                self.tally.add(tally_.LineOutcome(line, tally_.INVALID, problem))
            else:
                self.tally.add(tally_.LineOutcome(line, tally_.UNCONFIRMED))
