"""A second backend that serves a call when the primary cannot (issue 13, point 8).

The primary is tried first; when it fails transiently (:class:`BackendUnavailable`,
:class:`DeadlineExceeded`, or it ran out of its share of the call's time), the fallback
serves the same call within what is left of the caller's deadline. Every other error of
the primary (the request is invalid, too long, the upstream throttles or answers
garbage) is the answer: the fallback would not make it right, and a rate limit must
reach the caller with its RetryInfo.

:class:`PrimaryCircuit` keeps a failing primary from being tried on every call: after
``failures`` transient failures in a row it opens, and calls go straight to the fallback
for ``cooldown`` seconds; then one call (the probe) tries the primary again, and its
success closes the circuit, its failure opens it for another cooldown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from san_jobs.ai_gateway.backends.base import Backend
from san_jobs.ai_gateway.errors import BackendUnavailable, DeadlineExceeded

logger = logging.getLogger("ai_gateway.fallback")

T = TypeVar("T")
Clock = Callable[[], float]
# The work of one call, given the backend to ask and its time left (None: no deadline).
Work = Callable[[Backend, float | None], Awaitable[T]]

# What a primary's transient failure is: worth serving from the fallback, and counted
# toward opening the circuit.
TRANSIENT = (BackendUnavailable, DeadlineExceeded, TimeoutError)


class PrimaryCircuit:
    """Closed (the primary is asked), open (it is not, until the cooldown ends), and
    the one probe call in between. ``clock`` is injectable for tests."""

    def __init__(
        self, name: str, *, failures: int, cooldown: float, clock: Clock = time.monotonic
    ) -> None:
        self.name = name
        self.failures = failures
        self.cooldown = cooldown
        self._clock = clock
        self._in_a_row = 0
        self._opened_at: float | None = None
        self._retry_at = 0.0
        self._probing = False

    @property
    def is_open(self) -> bool:
        """True while calls go to the fallback without asking the primary."""
        return self._opened_at is not None

    def try_primary(self) -> bool:
        """Whether this call should ask the primary. Past the cooldown of an open
        circuit the first caller to ask becomes the probe (True), the others go on to
        the fallback until the probe has an outcome."""
        if self._opened_at is None:
            return True
        if self._probing or self._clock() < self._retry_at:
            return False
        self._probing = True
        return True

    def succeeded(self) -> None:
        """The primary answered (an error that is not transient counts too: it is up)."""
        self._in_a_row = 0
        self._probing = False
        if self._opened_at is not None:
            down = self._clock() - self._opened_at
            self._opened_at = None
            logger.info(
                "primary backend %s circuit closed: it answered again after %.1f s "
                "of failures; calls go to it again",
                self.name,
                down,
            )

    def failed(self, error: BaseException) -> None:
        """The primary failed transiently: count it; open (or keep open) the circuit."""
        self._in_a_row += 1
        was_probe = self._probing
        self._probing = False
        now = self._clock()
        if self._opened_at is not None:
            if was_probe:  # still down: another cooldown, no new log line
                self._retry_at = now + self.cooldown
            return
        if self._in_a_row >= self.failures:
            self._opened_at = now
            self._retry_at = now + self.cooldown
            logger.warning(
                "primary backend %s circuit open after %d transient failures in a row "
                "(last: %s); calls go to the fallback, the primary is tried again in %.1f s",
                self.name,
                self._in_a_row,
                _describe(error),
                self.cooldown,
            )

    def abandoned(self) -> None:
        """The call asking the primary went away without an outcome (cancelled): it
        tells nothing, and if it was the probe, the next call probes instead."""
        self._probing = False


class Fallback:
    """Serves calls from ``primary``, or from ``fallback`` when the primary fails
    transiently or its circuit is open.

    ``reserve`` seconds of a call's deadline are kept for the fallback: the primary
    gets the rest, but at least half of the time the call has.
    """

    def __init__(
        self,
        primary: Backend,
        fallback: Backend,
        circuit: PrimaryCircuit,
        *,
        reserve: float,
        clock: Clock = time.monotonic,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.circuit = circuit
        self.reserve = reserve
        self._clock = clock

    async def serve(self, work: Work[T], deadline: float | None) -> tuple[T, bool]:
        """``work`` done by the primary or the fallback, all by ``deadline`` (on
        ``clock``; None: no deadline); and whether the fallback did it."""
        if self.circuit.try_primary():
            primary_deadline = self._primary_deadline(deadline)
            try:
                result = await self._within(work, self.primary, primary_deadline)
            except TRANSIENT as err:
                self.circuit.failed(err)
                logger.debug(
                    "primary %s failed (%s): the fallback serves", self.primary.name, _describe(err)
                )
            except asyncio.CancelledError:
                self.circuit.abandoned()
                raise
            except Exception:
                self.circuit.succeeded()
                raise
            else:
                self.circuit.succeeded()
                return result, False
        return await work(self.fallback, _left(deadline, self._clock())), True

    async def _within(self, work: Work[T], backend: Backend, deadline: float | None) -> T:
        """``work`` on ``backend``, cut off at ``deadline`` (TimeoutError): a backend
        that ignores its time left still ends in time for the fallback."""
        if deadline is None:
            return await work(backend, None)
        left = max(0.0, deadline - self._clock())
        async with asyncio.timeout(left):
            return await work(backend, left)

    def _primary_deadline(self, deadline: float | None) -> float | None:
        if deadline is None:
            return None
        now = self._clock()
        left = max(0.0, deadline - now)
        return now + max(left - self.reserve, left / 2)


def _left(deadline: float | None, now: float) -> float | None:
    return None if deadline is None else max(0.0, deadline - now)


def _describe(error: BaseException) -> str:
    """A failure in words for the log (our own cut-off has none of its own)."""
    if isinstance(error, TimeoutError):
        return "no answer within its share of the deadline"
    return str(error)
