"""Job ids: UUIDv7 (RFC 9562), time-ordered.

A random UUIDv4 primary key puts every new job on a random leaf of the id index: on a
table of ten million jobs that is a page read per insert that no cache keeps (measured
with bench/bench_big_table.py, issue 14). A UUIDv7 starts with the time in
milliseconds, so new ids land on the index's right edge, which stays in memory. It
keeps 76 random bits, so ids are still not guessable; it does say about when the job
was made, which Job.create_time says anyway. (uuid6.uuid7 keeps ids of one process
increasing by moving the time one millisecond on when two fall in the same one; so
under more than 1,000 enqueues a second the time in the id runs ahead of the clock.
Nothing reads time from an id: order them by create_time.)
"""

from __future__ import annotations

import uuid6


def new_job_id() -> str:
    return str(uuid6.uuid7())
