"""`clients.sdk`, the SDK's name before `san_jobs.client`, still imports for one
release: the very same objects, with a DeprecationWarning that names the new one."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest

import clients
import san_jobs.client
import san_jobs.client.outbox
from tests.support.install_extras import blocked_imports, run_without

WARNING = r"^clients\.sdk is now san_jobs\.client"
# clients.sdk exported these from its outbox before the move (git show 2b8dc30~1).
OLD_OUTBOX_NAMES = (
    "OUTBOX_MIGRATION",
    "Outbox",
    "OutboxEntry",
    "create_outbox_table",
    "outbox_table",
)


def import_fresh(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    """Import ``name`` as a first import would (the warning is given once per process)."""
    for loaded in [m for m in sys.modules if m == "clients.sdk" or m.startswith("clients.sdk.")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.delattr(clients, "sdk", raising=False)
    with pytest.warns(DeprecationWarning, match=WARNING):
        return importlib.import_module(name)


def same_exports(old: ModuleType, new: ModuleType) -> bool:
    exported: list[str] = new.__all__
    return old.__all__ == exported and all(
        getattr(old, name) is getattr(new, name) for name in exported
    )


def test_the_old_name_warns_and_is_the_same_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    old = import_fresh(monkeypatch, "clients.sdk")
    new_names: list[str] = san_jobs.client.__all__
    assert old.__all__ == [*new_names, *OLD_OUTBOX_NAMES]
    assert all(getattr(old, name) is getattr(san_jobs.client, name) for name in new_names)
    assert old.JobsClient is san_jobs.client.JobsClient


def test_the_old_name_still_has_the_outbox_it_exported(monkeypatch: pytest.MonkeyPatch) -> None:
    old = import_fresh(monkeypatch, "clients.sdk")
    for name in OLD_OUTBOX_NAMES:
        assert getattr(old, name) is getattr(san_jobs.client.outbox, name)
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = old.no_such_name


def test_the_old_outbox_name_warns_and_is_the_same_outbox(monkeypatch: pytest.MonkeyPatch) -> None:
    old = import_fresh(monkeypatch, "clients.sdk.outbox")
    assert same_exports(old, san_jobs.client.outbox)
    assert old.Outbox is san_jobs.client.outbox.Outbox


def test_the_old_name_imports_with_only_the_sdk_installed() -> None:
    # The outbox's names are looked up on use, so `pip install san-jobs` alone still
    # imports clients.sdk; only using the outbox asks for SQLAlchemy.
    done = run_without(
        """
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import clients.sdk
        print(caught[0].category.__name__, clients.sdk.JobsClient.__module__)
        try:
            clients.sdk.Outbox
        except ModuleNotFoundError as error:
            print("Outbox needs", error.name)
        """,
        blocked_imports(),
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "DeprecationWarning san_jobs.client._client",
        "Outbox needs sqlalchemy",
    ]
