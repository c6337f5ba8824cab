"""Every bound JobService puts on what a caller sends, in one place.

Each limit here is also written in the proto comment of its field
(proto/san/jobs/v1/job_service.proto) and in the README's "Limits" table. Lengths
are in characters (code points), counts in items. The whole message is bounded by
`--max-message-bytes` (settings.py), enforced by gRPC itself.
"""

from __future__ import annotations

# -- identifier-like strings (no control characters at all) --------------------------
MAX_TARGET_ID_CHARS = 256
MAX_REQUEST_ID_CHARS = 256
MAX_REQUESTED_BY_CHARS = 256
# A job id is a UUID; this only bounds what is read (and echoed) before that check.
# uuid.UUID accepts up to 45 characters ("urn:uuid:" + 36).
MAX_JOB_ID_CHARS = 64
# A page token is ours (base64 of a timestamp and a job id, about 100 characters).
MAX_PAGE_TOKEN_CHARS = 512
# Control characters are never valid in a URL (RFC 3986).
MAX_URL_CHARS = 4_096

# -- free text (anything but NUL) ----------------------------------------------------
# Input texts (card text, TIL notes in all, recall source texts in all): the
# operator's `--max-text-chars`, default below.
DEFAULT_MAX_TEXT_CHARS = 100_000
MAX_TITLE_CHARS = 1_000  # card title, recall source title
MAX_CANCEL_REASON_CHARS = 1_000
# error_message is stored cut to 1,000 characters plus "...": no longer needle can match.
MAX_ERROR_MESSAGE_CONTAINS_CHARS = 1_003

# -- repeated fields ----------------------------------------------------------------
MAX_TIL_NOTES = 1_000
MAX_RECALL_SOURCES = 100
MAX_STREAM_JOB_IDS = 1_000
# BatchEnqueue's requests: at least one, at most this many (each bounded as Enqueue's).
MAX_BATCH_ENQUEUE_REQUESTS = 1_000
# RetryFailed moves at most MAX_RETRY_LIMIT jobs; longer id lists cannot matter and
# would exceed the databases' bound-parameter limits (PostgreSQL: 32,767).
MAX_RETRY_JOB_IDS = 10_000
MAX_RETRY_TARGET_IDS = 10_000
# job_types / statuses filters: there are only a handful of values; repeats are harmless.
MAX_ENUM_FILTER_VALUES = 100

# -- numbers --------------------------------------------------------------------------
MAX_ATTEMPTS_LIMIT = 100
# EnqueueRequest.schedule_time: at most this far after the call (one year, a leap one).
MAX_SCHEDULE_AHEAD_SECONDS = 366 * 24 * 3600
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1_000
DEFAULT_RETRY_LIMIT = 1_000
MAX_RETRY_LIMIT = 10_000

# -- whole messages ------------------------------------------------------------------
# `--max-message-bytes`: gRPC's receive and send limit of JobService's server.
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MIN_MAX_MESSAGE_BYTES = 64 * 1024
MAX_MAX_MESSAGE_BYTES = 2**31 - 1  # gRPC's options are C ints
# The largest gateway answer a job stores (serialized). Real answers are a few KiB
# (an embedding of 3,072 floats is 12 KiB); this keeps a job (input about 1 MB at the
# default limits, answer, attempt history) well inside one 4 MiB message, so GetJob,
# a stream message or a ListJobs entry can always carry it.
MAX_RESULT_BYTES = 1024 * 1024
# A ListJobs page is cut short so its jobs leave this much of the send limit free
# (next_page_token and framing are far smaller).
LIST_PAGE_HEADROOM_BYTES = 16 * 1024

# -- GetUsage ---------------------------------------------------------------------------
# The range of attempt end times one GetUsage sums: it reads every job updated since the
# start, so a range is bounded; unset start means this long before the end.
DEFAULT_USAGE_RANGE_SECONDS = 24 * 3600
MAX_USAGE_RANGE_SECONDS = 366 * 24 * 3600
# (job type, model, caller) groups in one answer; the rest are left out (truncated).
MAX_USAGE_GROUPS = 1_000

# PENDING jobs one authenticated caller may have (--max-pending-per-caller,
# san_jobs/job_service/pending_quota.py).
DEFAULT_MAX_PENDING_PER_CALLER = 100_000
