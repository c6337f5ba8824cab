"""A private PostgreSQL cluster for tests that stop and start the server.

The machine's main cluster serves every other test running at the same time, so a
test that restarts PostgreSQL gets a cluster of its own (Debian's postgresql-common
tools: pg_createcluster, pg_ctlcluster, pg_dropcluster; they need root, as on CI):

    with private_cluster() as cluster:
        url = cluster.url             # postgresql+asyncpg://postgres@127.0.0.1:PORT/postgres
        cluster.stop(); cluster.start()

`private_cluster_unavailable_reason()` says why one cannot be made here (None if it can).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.jobs_api import free_port

_TOOLS = ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster")
_SERVER_BINARIES = Path("/usr/lib/postgresql")


def installed_major_version() -> str | None:
    """The newest PostgreSQL major version whose server binaries are installed."""
    if not _SERVER_BINARIES.is_dir():
        return None
    versions = [
        entry.name
        for entry in _SERVER_BINARIES.iterdir()
        if entry.name.isdigit() and (entry / "bin" / "initdb").exists()
    ]
    return max(versions, key=int) if versions else None


def private_cluster_unavailable_reason() -> str | None:
    """None if a private cluster can be made here, else why not."""
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return f"postgresql-common tools missing: {', '.join(missing)}"
    if installed_major_version() is None:
        return f"no PostgreSQL server binaries under {_SERVER_BINARIES}"
    if os.geteuid() != 0:
        return "making a private PostgreSQL cluster needs root"
    return None


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")


@dataclass
class PrivateCluster:
    """A running throwaway cluster: trust auth on 127.0.0.1:`port`, user postgres."""

    version: str
    name: str
    port: int

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        """A fast shutdown: sessions are ended, open transactions rolled back."""
        _run("pg_ctlcluster", self.version, self.name, "stop", "-m", "fast")

    def start(self) -> None:
        _run("pg_ctlcluster", self.version, self.name, "start")

    def restart(self) -> None:
        _run("pg_ctlcluster", self.version, self.name, "restart", "-m", "fast")


@contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    """Create and start a cluster on a free port; stop and drop it when the block ends."""
    version = installed_major_version()
    if version is None:
        raise RuntimeError("no PostgreSQL server installed")
    cluster = PrivateCluster(version, f"san_test_{uuid.uuid4().hex[:10]}", free_port())
    _run(
        "pg_createcluster",
        version,
        cluster.name,
        "--port",
        str(cluster.port),
        # No durability work: the cluster lives for one test (it listens on
        # localhost only, the default).
        "-o",
        "fsync=off",
        "--",
        "--auth=trust",
    )
    try:
        cluster.start()
        yield cluster
    finally:
        _run("pg_dropcluster", "--stop", version, cluster.name)
