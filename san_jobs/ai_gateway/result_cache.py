"""The gateway's result cache: an answer kept for identical calls (issue 13, point 10).

A key is the RPC method, the model that answers (the primary backend's models), and the
SHA-256 of the call's validated input in a canonical form (JSON, keys sorted). The
cache holds successful answers only, at most ``entries`` of them, the least recently
used leaving first, each for ``ttl`` seconds. Callers share it: the same input gets the
same answer whoever asks, so there is no per-caller isolation to keep.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class CacheKey:
    """What makes two calls identical."""

    method: str
    model: str
    input_sha256: str


def input_digest(value: object) -> str:
    """SHA-256 (hex) of ``value`` in canonical JSON: a dataclass as its fields, keys
    sorted, no spaces. Equal inputs give equal digests whatever built them."""
    plain = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value  # type: ignore[arg-type]
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_key(method: str, model: str, value: object) -> CacheKey:
    """The key of a call of ``method`` answered by ``model`` for input ``value``."""
    return CacheKey(method, model, input_digest(value))


class ResultCache:
    """An LRU map of answers with a time to live; ``entries`` 0 keeps nothing.

    ``clock`` (seconds, monotonic) is injectable for tests.
    """

    def __init__(self, entries: int, ttl: float, clock: Clock = time.monotonic) -> None:
        self.entries = entries
        self.ttl = ttl
        self._clock = clock
        # key -> (expires at, answer); the end of the order is the most recently used.
        self._answers: OrderedDict[CacheKey, tuple[float, Any]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        """False when the cache keeps nothing (``--cache-entries 0``)."""
        return self.entries > 0

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, key: CacheKey) -> Any | None:
        """The answer kept for ``key`` (now the most recently used), or None."""
        found = self._answers.get(key)
        if found is None:
            return None
        expires, answer = found
        if self._clock() >= expires:
            del self._answers[key]
            return None
        self._answers.move_to_end(key)
        return answer

    def put(self, key: CacheKey, answer: Any) -> None:
        """Keep ``answer`` for ``key``, dropping the least recently used beyond ``entries``."""
        if not self.enabled:
            return
        self._answers[key] = (self._clock() + self.ttl, answer)
        self._answers.move_to_end(key)
        while len(self._answers) > self.entries:
            self._answers.popitem(last=False)
