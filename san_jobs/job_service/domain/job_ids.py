"""Job ids: UUIDv7 (RFC 9562), time-ordered.

A random UUIDv4 primary key puts every new job on a random leaf of the id index: on a
table of ten million jobs that is a page read per insert that no cache keeps (measured
with bench/bench_big_table.py, issue 14). A UUIDv7 starts with the time in
milliseconds, so new ids land on the index's right edge, which stays in memory.

Ids of one process increase (RFC 9562 section 6.2, method 1): the 12 bits after the
version (rand_a) are a counter within the millisecond, started at a random value
below 2,048 each new millisecond and counted up for each further id in it. Only past
4,096 ids in one millisecond (4 million a second) does the time in an id move ahead
of the clock, one millisecond at a time; a BatchEnqueue burst of 20,000 jobs a second
keeps the true time. The 62 bits after the variant are random (from `secrets`), so
ids are not guessable; an id does say about when the job was made, which
Job.create_time says anyway. Nothing reads time from an id: order by create_time.

Made here rather than with `str(uuid6.uuid7())`: that builds a `uuid.UUID` (which
checks and rewrites its integer) only to print it, half the cost of an id (issue 15).
"""

from __future__ import annotations

import secrets
import time

_VERSION_7 = 0x7 << 76
_VARIANT_RFC_9562 = 0b10 << 62
_RAND_B_BITS = 62
_COUNTER_MAX = (1 << 12) - 1
# A new millisecond's counter starts below this: at least 2,048 ids fit before it
# would overflow into the next millisecond.
_COUNTER_START_BITS = 11
_MAX_MILLISECONDS = (1 << 48) - 1

_last_milliseconds = -1
_counter = 0


def _next_stamps(count: int) -> list[tuple[int, int]]:
    """(milliseconds, counter) of the next `count` ids, increasing, from one clock read."""
    global _last_milliseconds, _counter
    now = time.time_ns() // 1_000_000
    milliseconds, counter = _last_milliseconds, _counter
    stamps: list[tuple[int, int]] = []
    for _ in range(count):
        if now > milliseconds:
            milliseconds, counter = now, secrets.randbits(_COUNTER_START_BITS)
        elif counter < _COUNTER_MAX:
            counter += 1
        else:  # 4,096 ids in one millisecond (or the clock went back): move on one
            milliseconds, counter = milliseconds + 1, secrets.randbits(_COUNTER_START_BITS)
        stamps.append((milliseconds, counter))
    _last_milliseconds, _counter = milliseconds, counter
    return stamps


def _text(milliseconds: int, counter: int, random_bits: int) -> str:
    value = (
        (milliseconds & _MAX_MILLISECONDS) << 80
        | _VERSION_7
        | counter << 64
        | _VARIANT_RFC_9562
        | random_bits
    )
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def new_job_id() -> str:
    """A new UUIDv7 in its canonical text form (lowercase, with hyphens)."""
    ((milliseconds, counter),) = _next_stamps(1)
    return _text(milliseconds, counter, secrets.randbits(_RAND_B_BITS))


def new_job_ids(count: int) -> list[str]:
    """`count` new ids, as `count` calls of new_job_id would make them (increasing),
    from one clock read and one read of the random source: a BatchEnqueue chunk's ids
    cost a third less each (issue 15)."""
    # 64 random bits per id, the low 62 used.
    blob = secrets.token_bytes(8 * count)
    mask = (1 << _RAND_B_BITS) - 1
    return [
        _text(milliseconds, counter, int.from_bytes(blob[8 * i : 8 * i + 8], "big") & mask)
        for i, (milliseconds, counter) in enumerate(_next_stamps(count))
    ]
