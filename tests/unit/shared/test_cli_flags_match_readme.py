"""Each program's flags are its settings model's fields, one flag per field and one
field per flag, and docs/configuration.md's table of that program lists exactly those flags with
their environment variables: a field added without its row there (or a row left
behind by a removed field) fails here."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from san_jobs.ai_gateway.cli import build_parser as gateway_parser
from san_jobs.job_service.cli import build_parser as job_service_parser
from san_jobs.jobsctl.cli import build_parser as jobsctl_parser
from san_jobs.shared.cli_settings import SettingsParser, env_of, flag_of
from san_jobs.web.cli import build_parser as web_parser

README = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
# Longest first: SAN_JOBSCTL_ before SAN_JOBS_.
PREFIXES = ("SAN_JOBSCTL_", "SAN_GATEWAY_", "SAN_JOBS_", "SAN_WEB_")
PROGRAMS: dict[str, tuple[Callable[[], SettingsParser], str]] = {
    "job-service": (job_service_parser, "SAN_JOBS_"),
    "ai-gateway": (gateway_parser, "SAN_GATEWAY_"),
    "jobsctl": (jobsctl_parser, "SAN_JOBSCTL_"),
    "san-web": (web_parser, "SAN_WEB_"),
}


def readme_rows() -> dict[str, list[tuple[list[str], list[str]]]]:
    """Every row of README's `| flag | environment | ...` tables, as (flags, the
    environment column's names), by the prefix of the variables it names."""
    rows: dict[str, list[tuple[list[str], list[str]]]] = {}
    in_table = False
    for line in README.read_text(encoding="utf-8").splitlines():
        if re.match(r"\|\s*flag\s*\|\s*environment\s*\|", line):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
        if not in_table or re.match(r"\|\s*-", line):
            continue
        flag_cell, env_cell = line.strip("|").split("|")[:2]
        flags = re.findall(r"`(--[a-z0-9-]+)`", flag_cell)
        names = re.findall(r"`([^`]+)`", env_cell)
        prefix = next(p for p in PREFIXES if any(name.startswith(p) for name in names))
        rows.setdefault(prefix, []).append((flags, names))
    return rows


def setting_flags(parser: SettingsParser) -> dict[str, str]:
    """The parser's flags that set a settings field: flag -> field (``--no-x`` left out)."""
    assert parser.settings_model is not None
    fields = parser.settings_model.model_fields
    return {
        option: action.dest
        for action in parser._actions
        if action.dest in fields
        for option in action.option_strings
        if not option.startswith("--no-")
    }


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_field_has_its_flag_and_every_flag_its_field(program: str) -> None:
    build, _ = PROGRAMS[program]
    parser = build()
    assert parser.settings_model is not None
    fields = parser.settings_model.model_fields
    assert setting_flags(parser) == {flag_of(name): name for name in fields}


@pytest.mark.parametrize("program", PROGRAMS)
def test_the_readme_table_lists_exactly_the_flags(program: str) -> None:
    build, prefix = PROGRAMS[program]
    parser = build()
    rows = readme_rows()[prefix]
    documented = [flag for flags, _ in rows for flag in flags]
    assert len(documented) == len(set(documented)), "a flag listed twice"
    derived = set(setting_flags(parser))
    undocumented, stale = derived - set(documented), set(documented) - derived
    assert not undocumented and not stale, (
        f"docs/configuration.md's {program} table lacks {sorted(undocumented)}, "
        f"and lists {sorted(stale)} that no setting has"
    )


@pytest.mark.parametrize("program", PROGRAMS)
def test_the_readme_table_names_each_flags_variable(program: str) -> None:
    build, prefix = PROGRAMS[program]
    model = build().settings_model
    assert model is not None
    for flags, names in readme_rows()[prefix]:
        variables = {env_of(model, flag[2:].replace("-", "_")) for flag in flags}
        for name in names:
            # `SAN_JOBS_TLS_…` stands for the row's variables starting so, `…_KEY` for
            # one ending so; any other name is one of the row's variables exactly.
            if name.endswith("…"):
                assert all(v.startswith(name[:-1]) for v in variables), (name, variables)
            elif name.startswith("…"):
                assert any(v.endswith(name[1:]) for v in variables), (name, variables)
            else:
                assert name in variables, (name, variables)
