"""Login attempts rate-limited per user name and per client address.

Only failed attempts count. Once a name or an address has ``max_failures`` failures
within ``window`` seconds, every attempt for it (even with the right password) is
answered 429 with the seconds until the oldest failure leaves the window: guessing is
bounded for one account from everywhere, and for every account from one address.

The counts live in this process (san-web runs as one). The number of names and
addresses remembered is bounded, oldest forgotten first, so a flood of made-up names
cannot grow the memory without limit.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

DEFAULT_WINDOW_SECONDS = 900.0
DEFAULT_MAX_FAILURES_PER_USER = 5
DEFAULT_MAX_FAILURES_PER_ADDRESS = 20
MAX_REMEMBERED_KEYS = 10_000


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

    def record(self, key: str) -> None:
        failures = self._recent(key)
        failures.append(self._clock())
        self._failures[key] = failures
        self._failures.move_to_end(key)
        while len(failures) > self.max_failures:
            failures.popleft()  # older ones can no longer decide anything
        while len(self._failures) > MAX_REMEMBERED_KEYS:
            self._failures.popitem(last=False)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)


class LoginThrottle:
    """Failed logins per user name and per client address."""

    def __init__(
        self,
        *,
        max_failures_per_user: int = DEFAULT_MAX_FAILURES_PER_USER,
        max_failures_per_address: int = DEFAULT_MAX_FAILURES_PER_ADDRESS,
        window: float = DEFAULT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._users = _FailureLog(max_failures_per_user, window, clock)
        self._addresses = _FailureLog(max_failures_per_address, window, clock)

    def retry_after(self, username: str, address: str) -> int | None:
        """Whole seconds (at least 1) to wait before trying ``username`` from
        ``address`` again, or None when the attempt may go ahead."""
        waits = [
            wait
            for wait in (self._users.retry_after(username), self._addresses.retry_after(address))
            if wait is not None
        ]
        return max(1, math.ceil(max(waits))) if waits else None

    def failed(self, username: str, address: str) -> None:
        self._users.record(username)
        self._addresses.record(address)

    def succeeded(self, username: str) -> None:
        """The right password: this name's earlier failures are forgiven (the
        address's are not, or one owned account would unlock guessing at others)."""
        self._users.forget(username)
