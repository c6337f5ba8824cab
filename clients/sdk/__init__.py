"""The typed JobService SDK: a sync and an asyncio client, typed errors, the messages.

>>> from clients.sdk import JobsClient, CardAnalysisInput
>>> with JobsClient("127.0.0.1:50051") as client:  # doctest: +SKIP
...     job = client.enqueue("scrap-1", CardAnalysisInput(text="Some page text")).job
...     print(client.wait(job.id, timeout=60).card_analysis_result.summary)
"""

from san.jobs.v1.job_service_pb2 import (
    CardAnalysisInput,
    CardAnalysisResult,
    EnqueueResponse,
    GetJobStatsResponse,
    Job,
    JobStatus,
    JobType,
    ListJobsResponse,
    RecallGenerationInput,
    RecallSource,
    RetryFailedResponse,
    TilGenerationInput,
)

from clients.sdk._async_client import AsyncJobsClient
from clients.sdk._channel import SERVICE_CONFIG, ChannelSettings, PemSource
from clients.sdk._client import JobsClient
from clients.sdk._errors import (
    DuplicateJobError,
    FieldViolation,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    JobsError,
    PermissionDeniedError,
    RateLimitedError,
    ServiceUnavailableError,
    UnauthenticatedError,
    WaitTimeoutError,
    error_from_rpc,
)
from clients.sdk._requests import TERMINAL_STATUSES, JobInput, is_terminal
from clients.sdk.outbox import (
    OUTBOX_MIGRATION,
    Outbox,
    OutboxEntry,
    create_outbox_table,
    outbox_table,
)

__all__ = [
    "OUTBOX_MIGRATION",
    "SERVICE_CONFIG",
    "TERMINAL_STATUSES",
    "AsyncJobsClient",
    "CardAnalysisInput",
    "CardAnalysisResult",
    "ChannelSettings",
    "DuplicateJobError",
    "EnqueueResponse",
    "FieldViolation",
    "GetJobStatsResponse",
    "InvalidJobStateError",
    "InvalidRequestError",
    "Job",
    "JobInput",
    "JobNotFoundError",
    "JobStatus",
    "JobType",
    "JobsClient",
    "JobsError",
    "ListJobsResponse",
    "Outbox",
    "OutboxEntry",
    "PemSource",
    "PermissionDeniedError",
    "RateLimitedError",
    "RecallGenerationInput",
    "RecallSource",
    "RetryFailedResponse",
    "ServiceUnavailableError",
    "TilGenerationInput",
    "UnauthenticatedError",
    "WaitTimeoutError",
    "create_outbox_table",
    "error_from_rpc",
    "is_terminal",
    "outbox_table",
]
