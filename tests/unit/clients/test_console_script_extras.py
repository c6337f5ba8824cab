"""Each console script works with its install extra alone (every other package
missing), and without it says which extra to install, in one line with exit code 2."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from san_jobs._console_scripts import PROGRAMS, Program, run
from tests.support.install_extras import (
    PROJECT,
    ROOT,
    blocked_imports,
    pyproject,
    run_without,
)

# The packages each program is made of; the shared helpers (san_jobs.shared.display,
# san_jobs.shared, ...) come in through their imports.
PROGRAM_PACKAGES = {
    "job-service": "san_jobs.job_service",
    "ai-gateway": "san_jobs.ai_gateway",
    "jobsctl": "san_jobs.jobsctl",
    "san-web": "san_jobs.web",
}
PROGRAM_IDS = [program.command for program in PROGRAMS]

# Every module of the program's package, those a program imports only once its flags
# are read included. Alembic's scripts run inside Alembic (job-service migrate, below)
# and __main__ would start the program.
IMPORT_EVERY_MODULE = """
import importlib
import pkgutil

package = importlib.import_module({package!r})
for found in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    if ".migrations" not in found.name and not found.name.endswith(".__main__"):
        importlib.import_module(found.name)
"""
RUN_COMMAND = """
import sys

from san_jobs import _console_scripts

sys.argv = {argv!r}
getattr(_console_scripts, {function!r})()
"""


def run_program(
    program: Program, *args: str, blocked: frozenset[str], stdin: str = ""
) -> tuple[int, str, str]:
    code = RUN_COMMAND.format(
        argv=[program.command, *args], function=program.command.replace("-", "_")
    )
    done = run_without(code, blocked, stdin=stdin)
    return done.returncode, done.stdout, done.stderr


def own_extras() -> set[str]:
    return set(pyproject()["project"]["optional-dependencies"]) - {"all", "dev"}


def test_every_console_script_goes_through_the_extra_check() -> None:
    scripts = pyproject()["project"]["scripts"]
    assert scripts == {
        program.command: f"san_jobs._console_scripts:{program.command.replace('-', '_')}"
        for program in PROGRAMS
    }
    assert {program.extra for program in PROGRAMS} <= own_extras()


def test_all_is_every_extra_and_dev_installs_all() -> None:
    extras = pyproject()["project"]["optional-dependencies"]
    assert [Requirement(text) for text in extras["all"]] == [
        Requirement(f"{PROJECT}[{','.join(sorted(own_extras()))}]")
    ]
    # `make install` (pip install -e '.[dev]') then gives every program.
    assert Requirement(f"{PROJECT}[all]") in [Requirement(text) for text in extras["dev"]]


def test_the_clients_doc_lists_every_extra() -> None:
    doc = (ROOT / "docs" / "clients.md").read_text(encoding="utf-8")
    table = doc.partition("| extra | for | adds |")[2].partition("\n\n")[0]
    listed = set(re.findall(r"^\| `([a-z]+)` \|", table, flags=re.MULTILINE))
    assert listed == set(pyproject()["project"]["optional-dependencies"])


def test_a_package_in_several_extras_has_one_version_range() -> None:
    ranges: dict[str, set[str]] = {}
    for texts in pyproject()["project"]["optional-dependencies"].values():
        for requirement in map(Requirement, texts):
            name = canonicalize_name(requirement.name)
            ranges.setdefault(name, set()).add(str(requirement.specifier))
    assert {name: found for name, found in ranges.items() if len(found) > 1} == {}


@pytest.mark.parametrize("program", PROGRAMS, ids=PROGRAM_IDS)
def test_every_module_of_a_program_imports_with_only_its_extra(program: Program) -> None:
    code = IMPORT_EVERY_MODULE.format(package=PROGRAM_PACKAGES[program.command])
    done = run_without(code, blocked_imports([program.extra]))
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize("program", PROGRAMS, ids=PROGRAM_IDS)
def test_a_program_runs_with_only_its_extra(program: Program) -> None:
    code, out, err = run_program(program, "--help", blocked=blocked_imports([program.extra]))
    assert (code, err) == (0, "")
    assert out.startswith(f"usage: {program.command} ")


def test_job_service_migrates_sqlite_with_only_the_server_extra(tmp_path: Path) -> None:
    # The database driver and Alembic's scripts are loaded only now, by name.
    database = tmp_path / "jobs.db"
    code, _, err = run_program(
        PROGRAMS[0],
        *("migrate", "--database-url", f"sqlite+aiosqlite:///{database}"),
        blocked=blocked_imports(["server"]),
    )
    assert code == 0, err
    with sqlite3.connect(database) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert "async_jobs" in tables


def test_san_web_adds_a_user_with_only_the_web_extra(tmp_path: Path) -> None:
    san_web = next(program for program in PROGRAMS if program.command == "san-web")
    url = f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"
    code, out, err = run_program(
        san_web,
        *("users", "create", "ada", "--database-url", url),
        blocked=blocked_imports(["web"]),
        stdin="correct horse battery staple\n",
    )
    assert (code, out, err) == (0, "created user ada\n", "")


@pytest.mark.parametrize("program", PROGRAMS, ids=PROGRAM_IDS)
def test_a_program_without_its_extra_names_the_extra_to_install(program: Program) -> None:
    code, out, err = run_program(program, "--help", blocked=blocked_imports())
    assert (code, out) == (2, "")
    assert err == (
        f"{program.command} needs the {program.extra} extra: "
        f"pip install 'san-jobs[{program.extra}]'\n"
    )


def test_a_module_missing_once_the_program_runs_names_the_extra_too(tmp_path: Path) -> None:
    # job-service imports its server (and grpc_health with it) only once its flags are
    # read: --help still works, the missing package shows when it serves or migrates.
    blocked = blocked_imports(["server"]) | {"grpc_health"}
    assert run_program(PROGRAMS[0], "--help", blocked=blocked)[0] == 0
    code, out, err = run_program(
        PROGRAMS[0],
        *("migrate", "--database-url", f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"),
        blocked=blocked,
    )
    assert (code, out) == (2, "")
    assert err == "job-service needs the server extra: pip install 'san-jobs[server]'\n"


def test_a_missing_module_of_the_project_itself_keeps_its_traceback() -> None:
    broken = Program("job-service", "server", "san_jobs.job_service.no_such_module")
    with pytest.raises(ModuleNotFoundError) as raised:
        run(broken)
    assert raised.value.name == "san_jobs.job_service.no_such_module"
