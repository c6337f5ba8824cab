"""The typed JobService SDK: a sync and an asyncio client, typed errors, the messages.

It needs only grpcio, protobuf and their status and common-protos packages
(`pip install san-jobs`). The transactional outbox, which needs SQLAlchemy, is
`san_jobs.client.outbox` (`pip install 'san-jobs[outbox]'`).

>>> from san_jobs.client import JobsClient, CardAnalysisInput
>>> with JobsClient("127.0.0.1:50051") as client:  # doctest: +SKIP
...     job = client.enqueue("scrap-1", CardAnalysisInput(text="Some page text")).job
...     print(client.wait(job.id, timeout=60).card_analysis_result.summary)
"""

from san_jobs.client._async_client import AsyncJobsClient
from san_jobs.client._batch import EnqueueOutcome
from san_jobs.client._channel import SERVICE_CONFIG, ChannelSettings, PemSource
from san_jobs.client._client import JobsClient
from san_jobs.client._errors import (
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
from san_jobs.client._requests import TERMINAL_STATUSES, JobInput, is_terminal
from san_jobs.proto.jobs.v1.job_service_pb2 import (
    CardAnalysisInput,
    CardAnalysisResult,
    DispatchPause,
    EmbeddingInput,
    EmbeddingResult,
    EnqueueRequest,
    EnqueueResponse,
    GetJobStatsResponse,
    GetUsageResponse,
    Job,
    JobStatus,
    JobType,
    ListFailureGroupsResponse,
    ListJobsResponse,
    PauseReason,
    PruneJobsResponse,
    RecallGenerationInput,
    RecallGenerationResult,
    RecallSource,
    RetryFailedResponse,
    TilGenerationInput,
    TilGenerationResult,
)

__all__ = [
    "SERVICE_CONFIG",
    "TERMINAL_STATUSES",
    "AsyncJobsClient",
    "CardAnalysisInput",
    "CardAnalysisResult",
    "ChannelSettings",
    "DispatchPause",
    "DuplicateJobError",
    "EmbeddingInput",
    "EmbeddingResult",
    "EnqueueOutcome",
    "EnqueueRequest",
    "EnqueueResponse",
    "FieldViolation",
    "GetJobStatsResponse",
    "GetUsageResponse",
    "InvalidJobStateError",
    "InvalidRequestError",
    "Job",
    "JobInput",
    "JobNotFoundError",
    "JobStatus",
    "JobType",
    "JobsClient",
    "JobsError",
    "ListFailureGroupsResponse",
    "ListJobsResponse",
    "PauseReason",
    "PemSource",
    "PermissionDeniedError",
    "PruneJobsResponse",
    "RateLimitedError",
    "RecallGenerationInput",
    "RecallGenerationResult",
    "RecallSource",
    "RetryFailedResponse",
    "ServiceUnavailableError",
    "TilGenerationInput",
    "TilGenerationResult",
    "UnauthenticatedError",
    "WaitTimeoutError",
    "error_from_rpc",
    "is_terminal",
]
