"""What `pip install 'san-jobs[EXTRA]'` would install, and a Python that has only that.

The tests cannot uninstall packages from the shared venv. Instead they run a
subprocess whose ``sys.meta_path`` starts with a finder that raises
``ModuleNotFoundError`` for every import name of the installed distributions outside
the given extras (their dependencies included, read from each distribution's
metadata), as if those were never installed.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "san-jobs"
SDK_DISTRIBUTIONS = frozenset({"grpcio", "grpcio-status", "protobuf", "googleapis-common-protos"})
"""What the SDK needs, and all that `pip install san-jobs` may bring."""

# Every virtual environment has these, whatever was installed into it.
_ALWAYS_PRESENT = frozenset({"pip", "setuptools", "_distutils_hack", "pkg_resources"})
_BLOCKED_VARIABLE = "SAN_TEST_BLOCKED_IMPORTS"

# Runs first in the subprocess. A module imported before it (by a .pth file) could not
# be blocked any more, so that is an error rather than a silent pass.
_BLOCKER = """\
import os as _os
import sys as _sys

_BLOCKED = tuple(_os.environ.pop("SAN_TEST_BLOCKED_IMPORTS").split(","))


def _blocked(name):  # a blocked name, or a module inside one (san_jobs.web.app)
    return any(name == _b or name.startswith(_b + ".") for _b in _BLOCKED)


_EARLY = [_name for _name in _sys.modules if _blocked(_name)]
assert not _EARLY, f"imported before the blocker: {sorted(_EARLY)}"


class _NotInstalled:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if _blocked(name):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None


_sys.meta_path.insert(0, _NotInstalled)
del _os, _sys, _EARLY
"""


@cache
def pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def requirements(extra: str | None = None) -> list[Requirement]:
    """The base dependencies (``extra`` None) or one extra's, as pyproject.toml lists them."""
    project = pyproject()["project"]
    texts = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return [Requirement(text) for text in texts]


def _marker_holds(requirement: Requirement, extras: Iterable[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in {"", *extras})


def distributions(extras: Iterable[str] = ()) -> frozenset[str]:
    """The (canonical) names of every distribution `pip install 'san-jobs[EXTRAS]'`
    installs on this platform, dependencies of dependencies included, the project
    itself left out. The project's extras come from pyproject.toml, the others'
    requirements from their installed metadata."""
    found: set[str] = set()
    expanded: set[tuple[str, frozenset[str]]] = set()
    seen_extras: set[str] = set()
    pending: list[tuple[Requirement, frozenset[str]]] = []

    def add_project(wanted: Iterable[str]) -> None:
        pending.extend((r, frozenset()) for r in requirements())
        for extra in set(wanted) - seen_extras:
            seen_extras.add(extra)
            pending.extend((r, frozenset({extra})) for r in requirements(extra))

    add_project(extras)
    while pending:
        requirement, parent_extras = pending.pop()
        if not _marker_holds(requirement, parent_extras):
            continue
        name = canonicalize_name(requirement.name)
        if name == PROJECT:
            add_project(requirement.extras)
            continue
        key_extras = frozenset(requirement.extras)
        if (name, key_extras) in expanded:
            continue
        expanded.add((name, key_extras))
        found.add(name)
        try:
            metadata_requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here, so nothing of it can be imported either
        pending.extend((Requirement(text), key_extras) for text in metadata_requires)
    return frozenset(found)


def blocked_imports(extras: Iterable[str] = ()) -> frozenset[str]:
    """The top-level import names of every installed distribution that
    `pip install 'san-jobs[EXTRAS]'` would not install (the project's own packages
    are never in it: name them explicitly to block them)."""
    allowed = distributions(extras) | {PROJECT}
    owners = importlib.metadata.packages_distributions()
    return frozenset(
        name
        for name, dists in owners.items()
        if name.isidentifier()
        and name not in _ALWAYS_PRESENT
        and not any(canonicalize_name(dist) in allowed for dist in dists)
    )


def run_without(
    code: str, blocked: Iterable[str], *, stdin: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) in a fresh Python, from the checkout, where importing
    any of ``blocked`` (top-level names, or packages such as ``san_jobs.web``) or a
    module inside one raises ModuleNotFoundError; ``stdin`` is its
    standard input."""
    env = os.environ | {_BLOCKED_VARIABLE: ",".join(sorted(blocked))}
    program = _BLOCKER + "\n" + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
