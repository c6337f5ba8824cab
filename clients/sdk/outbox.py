"""Deprecated: now ``san_jobs.client.outbox`` (importing it warns, from ``clients.sdk``)."""

from san_jobs.client.outbox import *  # noqa: F403 (the whole public API, re-exported as is)
from san_jobs.client.outbox import __all__ as __all__
