"""Open streams checked again while they last: a revoked or expired token ends them.

A call is authenticated once, when it starts; a stream can last for hours. So every
stream opened with a bearer token is registered here, and one sweeper task looks each
distinct token up again (fresh, not from the cache) every cache period of the
verifier (2 s): a token that no longer verifies ends each of its streams with
UNAUTHENTICATED, as a new call with it is refused, within that period plus one
look-up. The cost is one look-up per distinct token per period, whatever the number
of streams (the web backend's thousands of job pages share one token), and no
look-up per message (two flag writes; 0.15 us measured). The sweeper runs only while a
stream is open.

How a stream is ended: the interceptor's wrapper marks, around each wait for the
handler's next message, that the stream is waiting in the handler. A stream found
revoked while it waits there has its task cancelled, and the wrapper, seeing its own
mark, turns the cancellation into the UNAUTHENTICATED status. A stream that is busy
elsewhere (grpc sending a message) is only marked, and ends before it asks the
handler for the next one: grpc's own code is never cancelled.

A database that cannot be reached ends nothing: the streams go on and the next period
tries again (a new call meanwhile gets UNAVAILABLE).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from san_jobs.job_service.storage.api_tokens import StoredToken

log = logging.getLogger("job_service.auth")

Verify = Callable[[str], Awaitable[StoredToken | None]]


class OpenStream:
    """One registered stream: its task, whether it now waits in its handler, and
    whether its token was found revoked."""

    __slots__ = ("caller", "ended", "rpc", "task", "token", "waiting")

    def __init__(self, token: str, caller: str, rpc: str, task: asyncio.Task[object]) -> None:
        self.token = token
        self.caller = caller
        self.rpc = rpc
        self.task = task
        self.waiting = False  # set by the wrapper around each wait for a message
        self.ended = False  # its token no longer verifies

    def end(self) -> None:
        """Mark the stream ended; cancel its task if it waits in the handler."""
        if self.ended:
            return
        self.ended = True
        if self.waiting:
            self.task.cancel()


class Recheck:
    """The registration of streams opened with one token for one RPC."""

    __slots__ = ("_checks", "_rpc", "_token")

    def __init__(self, checks: StreamChecks, token: str, rpc: str) -> None:
        self._checks = checks
        self._token = token
        self._rpc = rpc

    def open(self, caller: str) -> OpenStream:
        """Register the stream running in the current task, of `caller`."""
        return self._checks.open(self._token, caller, self._rpc)

    def close(self, stream: OpenStream) -> None:
        self._checks.close(stream)


class StreamChecks:
    """The open token-authenticated streams, checked every `period` seconds with
    `verify` (a fresh look-up)."""

    def __init__(self, verify: Verify, period: float) -> None:
        self._verify = verify
        self._period = period
        self._by_token: dict[str, set[OpenStream]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def for_token(self, token: str, rpc: str) -> Recheck:
        """How the interceptor registers a stream of `rpc` opened with `token`."""
        return Recheck(self, token, rpc)

    def open(self, token: str, caller: str, rpc: str) -> OpenStream:
        """Register the stream running in the current task."""
        task = asyncio.current_task()
        assert task is not None, "a stream runs in a task"
        stream = OpenStream(token, caller, rpc, task)
        self._by_token.setdefault(token, set()).add(stream)
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())
        return stream

    def close(self, stream: OpenStream) -> None:
        """Forget an ended stream (idempotent); the sweeper stops with the last one."""
        streams = self._by_token.get(stream.token)
        if streams is None:
            return
        streams.discard(stream)
        if not streams:
            del self._by_token[stream.token]
        if not self._by_token and self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    @property
    def open_streams(self) -> int:
        return sum(len(streams) for streams in self._by_token.values())

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._period)
            try:
                await self.sweep()
            except Exception:  # a bug must not stop every later check
                log.exception("checking the tokens of open streams failed")

    async def sweep(self) -> None:
        """Look every token up once; end the streams of those that no longer verify."""
        tokens = list(self._by_token)
        verdicts = await asyncio.gather(
            *(self._verify(token) for token in tokens), return_exceptions=True
        )
        failures = 0
        for token, verdict in zip(tokens, verdicts, strict=True):
            if isinstance(verdict, BaseException):
                failures += 1
                continue
            if verdict is None:
                for stream in list(self._by_token.get(token, ())):
                    if not stream.ended:
                        log.info(
                            "%s of %s ended: its token was revoked or has expired",
                            stream.rpc,
                            stream.caller,
                        )
                    stream.end()
        if failures:
            log.warning(
                "could not check the tokens of %d open stream caller(s); they stay open "
                "and are checked again in %.0fs",
                failures,
                self._period,
            )
