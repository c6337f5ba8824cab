"""The typed JobService SDK: an asyncio client and the same client blocking, typed
errors, the contract's messages and enums.

It needs only grpcio, protobuf and their status and common-protos packages
(`pip install san-jobs`). The transactional outbox and inbox, which need SQLAlchemy,
are `san_jobs.client.outbox` and `san_jobs.client.inbox` (`pip install
'san-jobs[outbox]'`); an in-memory JobService for your tests is
`san_jobs.client.testing`.

>>> from san_jobs.client import JobsClient, CardAnalysisInput
>>> with JobsClient("127.0.0.1:50051") as client:  # doctest: +SKIP
...     job = client.enqueue("scrap-1", CardAnalysisInput(text="Some page text")).job
...     done = client.wait(job.id, timeout=60)
...     print(done.status, done.card_analysis_result.summary)
JOB_STATUS_COMPLETED A short summary.
"""

from san_jobs.client._async_client import AsyncJobsClient
from san_jobs.client._batch import EnqueueOutcome
from san_jobs.client._channel import SERVICE_CONFIG, ChannelSettings, PemSource
from san_jobs.client._client import JobsClient
from san_jobs.client._errors import (
    CursorExpiredError,
    DuplicateJobError,
    FieldViolation,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    JobsError,
    PermissionDeniedError,
    RateLimitedError,
    ScheduleExistsError,
    ScheduleNotFoundError,
    ServiceUnavailableError,
    UnauthenticatedError,
    WaitTimeoutError,
    error_from_rpc,
)
from san_jobs.client._names import JobStatus, JobType, OnDuplicate, PauseReason
from san_jobs.client._requests import TERMINAL_STATUSES, JobInput, is_terminal
from san_jobs.client._views import as_message
from san_jobs.proto.jobs.v1.job_service_pb2 import (
    CardAnalysisInput,
    CardAnalysisResult,
    DispatchPause,
    EmbeddingInput,
    EmbeddingResult,
    EnqueueRequest,
    EnqueueResponse,
    FailureGroup,
    GetJobStatsResponse,
    GetUsageResponse,
    Job,
    JobAttempt,
    JobCount,
    ListFailureGroupsResponse,
    ListJobsResponse,
    ListSchedulesResponse,
    PruneCount,
    PruneJobsResponse,
    RecallGenerationInput,
    RecallGenerationResult,
    RecallQuestion,
    RecallSource,
    RetryFailedResponse,
    Schedule,
    SkippedJob,
    StreamJobChangesResponse,
    TilGenerationInput,
    TilGenerationResult,
    Usage,
    UsageTotal,
)

__all__ = [
    "SERVICE_CONFIG",
    "TERMINAL_STATUSES",
    "AsyncJobsClient",
    "CardAnalysisInput",
    "CardAnalysisResult",
    "ChannelSettings",
    "CursorExpiredError",
    "DispatchPause",
    "DuplicateJobError",
    "EmbeddingInput",
    "EmbeddingResult",
    "EnqueueOutcome",
    "EnqueueRequest",
    "EnqueueResponse",
    "FailureGroup",
    "FieldViolation",
    "GetJobStatsResponse",
    "GetUsageResponse",
    "InvalidJobStateError",
    "InvalidRequestError",
    "Job",
    "JobAttempt",
    "JobCount",
    "JobInput",
    "JobNotFoundError",
    "JobStatus",
    "JobType",
    "JobsClient",
    "JobsError",
    "ListFailureGroupsResponse",
    "ListJobsResponse",
    "ListSchedulesResponse",
    "OnDuplicate",
    "PauseReason",
    "PemSource",
    "PermissionDeniedError",
    "PruneCount",
    "PruneJobsResponse",
    "RateLimitedError",
    "RecallGenerationInput",
    "RecallGenerationResult",
    "RecallQuestion",
    "RecallSource",
    "RetryFailedResponse",
    "Schedule",
    "ScheduleExistsError",
    "ScheduleNotFoundError",
    "ServiceUnavailableError",
    "SkippedJob",
    "StreamJobChangesResponse",
    "TilGenerationInput",
    "TilGenerationResult",
    "UnauthenticatedError",
    "Usage",
    "UsageTotal",
    "WaitTimeoutError",
    "as_message",
    "error_from_rpc",
    "is_terminal",
]
