"""The console scripts' entry points (pyproject's ``[project.scripts]``).

``pip install san-jobs`` alone is the SDK; each program needs its install extra on top.
A program run without it says which extra to install, in one line with exit code 2,
instead of a traceback about a module. This module imports only the standard library,
so that it can always say so; each program's own module is imported when it runs.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

EXIT_MISSING_EXTRA = 2
"""What a program exits with when its extra is not installed (as for a usage error)."""

# The project's own top-level package: one of its modules missing is a broken
# install or a bug, not an extra left out, and keeps its traceback.
_OWN_PACKAGES = frozenset({"san_jobs"})


@dataclass(frozen=True, slots=True)
class Program:
    """A console script: its command, the extra it needs, the module whose ``main`` runs it."""

    command: str
    extra: str
    module: str

    def missing_extra_line(self) -> str:
        return f"{self.command} needs the {self.extra} extra: pip install 'san-jobs[{self.extra}]'"


JOB_SERVICE = Program("job-service", "server", "san_jobs.job_service.cli")
AI_GATEWAY = Program("ai-gateway", "server", "san_jobs.ai_gateway.cli")
JOBSCTL = Program("jobsctl", "cli", "san_jobs.jobsctl.cli")
SAN_WEB = Program("san-web", "web", "san_jobs.web.cli")
PROGRAMS = (JOB_SERVICE, AI_GATEWAY, JOBSCTL, SAN_WEB)


def _is_missing_extra(error: ModuleNotFoundError) -> bool:
    top_level = (error.name or "").partition(".")[0]
    return bool(top_level) and top_level not in _OWN_PACKAGES


def run(program: Program) -> None:
    """Import ``program``'s module and run its ``main()`` (it reads ``sys.argv``).

    The programs import some modules only once their flags are read (the server, a
    database driver), so a module missing while ``main()`` runs is reported the same
    way as one missing at import.
    """
    try:
        importlib.import_module(program.module).main()
    except ModuleNotFoundError as error:
        if not _is_missing_extra(error):
            raise
        sys.stderr.write(program.missing_extra_line() + "\n")
        raise SystemExit(EXIT_MISSING_EXTRA) from None


def job_service() -> None:
    run(JOB_SERVICE)


def ai_gateway() -> None:
    run(AI_GATEWAY)


def jobsctl() -> None:
    run(JOBSCTL)


def san_web() -> None:
    run(SAN_WEB)
