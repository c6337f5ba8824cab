"""Deprecated: the SDK is now ``san_jobs.client``; this name stays for one release.

``clients`` is too generic a top-level name to install into someone's environment, so
the SDK moved under the distribution's own name. Everything ``clients.sdk`` exported
is here still, as the very same objects: ``san_jobs.client``'s names, and the outbox's
(``Outbox``, ...), which now live in ``san_jobs.client.outbox`` and are imported from
there on first use, since they need SQLAlchemy (``pip install 'san-jobs[outbox]'``).
``clients.sdk.outbox`` is ``san_jobs.client.outbox``. Importing either warns once.
"""

import importlib
import warnings
from typing import TYPE_CHECKING

from san_jobs.client import *  # noqa: F403 (the whole public API, re-exported as is)
from san_jobs.client import __all__ as _sdk_names

if TYPE_CHECKING:  # what type checkers see; at run time, __getattr__ below
    from san_jobs.client.outbox import (
        OUTBOX_MIGRATION,
        Outbox,
        OutboxEntry,
        create_outbox_table,
        outbox_table,
    )

# The SDK's names, then what clients.sdk exported from its outbox before the move.
__all__ = [
    *_sdk_names,
    "OUTBOX_MIGRATION",
    "Outbox",
    "OutboxEntry",
    "create_outbox_table",
    "outbox_table",
]

warnings.warn(
    "clients.sdk is now san_jobs.client; import san_jobs.client "
    "(and san_jobs.client.outbox for the outbox); clients.sdk goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> object:
    # Called only for a name not found: of __all__, that is an outbox name.
    if name in __all__:
        return getattr(importlib.import_module("san_jobs.client.outbox"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
