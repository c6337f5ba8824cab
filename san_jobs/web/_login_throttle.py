"""Failed logins, counted per (user name, client address) and per client address.

An attempt is counted when it starts (:meth:`LoginThrottle.reserve`: the check and the
count with no ``await`` between them), before its password is verified, and forgiven
only if the password was right. Verifying takes tens of milliseconds of argon2, so a
throttle written after it let 40 wrong passwords sent at once all through (40 × 401).

- **Per (name, address)**: ``free_failures`` failures cost nothing; after them every
  attempt waits, from the last failure, a delay that doubles (30 s, 60 s, 120 s, ... at
  most 15 minutes); the right password resets it. Nothing sent from another address
  delays this pair: a guesser elsewhere cannot lock a user (an operator) out, as a
  lock per name let anyone do with 5 wrong guesses.
- **Per address**: ``max_failures_per_address`` failures within 15 minutes, whatever the
  names, and every login from that address gets 429 until the oldest leaves the window:
  one place cannot try many names. (IPv6 addresses count by /64: ``address_key``.)

The counts live in this process (san-web runs as one). The number of pairs and
addresses remembered is bounded, oldest forgotten first, so a flood of made-up names
cannot grow the memory without limit.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from san_jobs.web._client_address import address_key

DEFAULT_WINDOW_SECONDS = 900.0
DEFAULT_FREE_FAILURES = 5
DEFAULT_MAX_FAILURES_PER_ADDRESS = 20
FIRST_DELAY_SECONDS = 30.0
MAX_DELAY_SECONDS = 900.0
MAX_REMEMBERED_KEYS = 10_000
MAX_REMEMBERED_PAIRS = 50_000


class _FailureLog:
    """Failure times per key, each kept for ``window`` seconds."""

    def __init__(self, max_failures: int, window: float, clock: Callable[[], float]) -> None:
        self.max_failures = max_failures
        self.window = window
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, key: str) -> deque[float]:
        failures = self._failures.get(key)
        if failures is None:
            return deque()
        horizon = self._clock() - self.window
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            del self._failures[key]
        return failures

    def retry_after(self, key: str) -> float | None:
        """Seconds until ``key`` may try again, or None if it may now."""
        failures = self._recent(key)
        if len(failures) < self.max_failures:
            return None
        return max(0.0, failures[-self.max_failures] + self.window - self._clock())

    def record(self, key: str) -> float:
        """Count a failure of ``key`` now; its time (to :meth:`forgive` it)."""
        failures = self._recent(key)
        now = self._clock()
        failures.append(now)
        self._failures[key] = failures
        self._failures.move_to_end(key)
        while len(failures) > self.max_failures:
            failures.popleft()  # older ones can no longer decide anything
        while len(self._failures) > MAX_REMEMBERED_KEYS:
            self._failures.popitem(last=False)
        return now

    def forgive(self, key: str, when: float) -> None:
        """Take back the failure counted at ``when`` (it was a success after all)."""
        failures = self._failures.get(key)
        if failures is not None and when in failures:
            failures.remove(when)
            if not failures:
                del self._failures[key]


@dataclass
class _Backoff:
    """One (name, address) pair's failures in a row, attempts under way included."""

    failures: int = 0
    last: float = 0.0


@dataclass(frozen=True)
class Throttled:
    """The attempt may not go ahead: 429 with ``Retry-After: retry_after``."""

    retry_after: int


class LoginAttempt:
    """A login counted as failed until :meth:`succeeded` says otherwise."""

    def __init__(
        self, throttle: LoginThrottle, pair: tuple[str, str], backoff: _Backoff, at: float
    ) -> None:
        self._throttle = throttle
        self._pair = pair
        self._backoff = backoff
        self._at = at

    def failed(self) -> None:
        """The password was wrong: the delay runs from now (the answer), not from the
        start of the attempt."""
        self._throttle._failed(self._pair, self._backoff)

    def succeeded(self) -> None:
        """The right password: the pair starts afresh and this attempt leaves the
        address's count (earlier failures stay there, or one owned account would
        unlock guessing at others)."""
        self._throttle._succeeded(self._pair, self._at)


class LoginThrottle:
    """Failed logins per (user name, client address) and per client address."""

    def __init__(
        self,
        *,
        free_failures: int = DEFAULT_FREE_FAILURES,
        max_failures_per_address: int = DEFAULT_MAX_FAILURES_PER_ADDRESS,
        window: float = DEFAULT_WINDOW_SECONDS,
        first_delay: float = FIRST_DELAY_SECONDS,
        max_delay: float = MAX_DELAY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free_failures = free_failures
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.window = window
        self._clock = clock
        self._pairs: OrderedDict[tuple[str, str], _Backoff] = OrderedDict()
        self._addresses = _FailureLog(max_failures_per_address, window, clock)

    def delay(self, failures: int) -> float:
        """Seconds an attempt waits after ``failures`` failures in a row (0: none)."""
        if failures < self.free_failures:
            return 0.0
        doublings = min(failures - self.free_failures, 32)  # 2.0**n stays a small float
        return min(self.max_delay, self.first_delay * 2.0**doublings)

    def reserve(self, username: str, address: str) -> LoginAttempt | Throttled:
        """Count an attempt for ``username`` from ``address`` now, or say how long it
        must wait. Nothing here awaits: two attempts sent at once are counted one after
        the other."""
        address = address_key(address)
        pair = (username, address)
        backoff = self._backoff(pair)
        waits = [backoff.last + self.delay(backoff.failures) - self._clock()]
        if (address_wait := self._addresses.retry_after(address)) is not None:
            waits.append(address_wait)
        if max(waits) > 0:
            return Throttled(max(1, math.ceil(max(waits))))
        backoff.failures += 1
        backoff.last = self._clock()
        self._remember(pair, backoff)
        return LoginAttempt(self, pair, backoff, self._addresses.record(address))

    def _backoff(self, pair: tuple[str, str]) -> _Backoff:
        """The pair's failures in a row; forgotten a window after its delay ran out."""
        backoff = self._pairs.get(pair)
        if backoff is None:
            return _Backoff()
        if self._clock() > backoff.last + self.delay(backoff.failures) + self.window:
            del self._pairs[pair]
            return _Backoff()
        return backoff

    def _failed(self, pair: tuple[str, str], backoff: _Backoff) -> None:
        current = self._pairs.get(pair)
        if current is not backoff:
            # A success (or age) reset the pair while this attempt ran: it counts anew.
            current = self._backoff(pair)
            current.failures += 1
            self._remember(pair, current)
        current.last = self._clock()

    def _remember(self, pair: tuple[str, str], backoff: _Backoff) -> None:
        self._pairs[pair] = backoff
        self._pairs.move_to_end(pair)
        while len(self._pairs) > MAX_REMEMBERED_PAIRS:
            self._pairs.popitem(last=False)

    def _succeeded(self, pair: tuple[str, str], at: float) -> None:
        self._pairs.pop(pair, None)
        self._addresses.forgive(pair[1], at)
