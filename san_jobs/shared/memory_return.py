"""Give the C heap's free memory back to the system soon after a large refused request.

gRPC reads a whole request before any of our code sees it, up to the server's message
limit (megabytes: an Enqueue may be that large). A request refused for its size has
still been held, in pieces, by gRPC's threads and by Python; once freed, glibc keeps
those pages in its arenas, and the process stays that large: 500 refused 12 MiB health
requests left the gateway 170 MiB bigger, for good. `malloc_trim(0)` hands the free
pages back (measured: to within a few MiB of the start).

Trimming alone is not enough: glibc raises its mmap threshold each time a large
mmapped block is freed, so after the first refused 12 MiB request the next ones come
from the arenas and fragment them (the gateway kept ~30-50 MiB even with trims).
`return_large_blocks()`, called once at start by each service, fixes the threshold at
glibc's own default (128 KiB): a block that large is always mapped and unmapped on
free. Measured with bench/bench_hostile_health.py: 1,000 hostile Watch calls leave
job-service +5 MiB and the gateway +1 MiB (before: +259 and +469 MiB).

`soon()` is cheap and may be called for every refusal: one daemon thread, started at
the first call, trims half a second after a request (a burst: at most two trims a
second) and once more five seconds after the last one, never on the event loop. Not
glibc (musl, macOS): nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable

# How long after a request the trim runs: the rest of a burst is freed by then.
DELAY_SECONDS = 0.5
# And once more this long after the last request of a burst.
SETTLE_SECONDS = 5.0


# glibc's mallopt parameter, and its default value (malloc.h).
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


def _libc_function(name: str) -> Callable[..., int] | None:
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        function: Callable[..., int] = getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):
        return None  # not glibc
    return function


def _find_malloc_trim() -> Callable[[int], int] | None:
    return _libc_function("malloc_trim")


def return_large_blocks() -> bool:
    """Have every allocation of MMAP_THRESHOLD_BYTES or more mapped on its own and
    given back when freed, for the rest of the process (see the module doc). False
    when the C library has no such setting."""
    mallopt = _libc_function("mallopt")
    return mallopt is not None and mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1


class _Trimmer:
    def __init__(self, trim: Callable[[int], int] | None) -> None:
        self._trim = trim
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.trims = 0

    def soon(self) -> None:
        if self._trim is None:
            return
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="memory-return", daemon=True
                    )
                    self._thread.start()
        self._wanted.set()

    def _run(self) -> None:
        assert self._trim is not None
        while True:
            self._wanted.wait()
            while self._wanted.is_set():  # a burst: one trim per DELAY_SECONDS while it lasts
                time.sleep(DELAY_SECONDS)
                self._wanted.clear()
                self._run_trim()
            # Once more when the burst is over: by then the caller's connection, with
            # its buffers, has usually closed too.
            if not self._wanted.wait(SETTLE_SECONDS):
                self._run_trim()

    def _run_trim(self) -> None:
        assert self._trim is not None
        self._trim(0)
        self.trims += 1


_TRIMMER = _Trimmer(_find_malloc_trim())


def soon() -> None:
    """Ask for the free C heap to be given back to the system shortly (see module doc)."""
    _TRIMMER.soon()


def trims() -> int:
    """How many trims have run in this process (for tests)."""
    return _TRIMMER.trims
