"""Code and docs cite the contract's notes as docs/contract.md, "SECTION": each cited
section exists, and nothing points at a CONTRACT.md or DESIGN.md the repository lacks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACT_NOTES = ROOT / "docs" / "contract.md"
SOURCES = ("san_jobs", "scripts", "tests", "bench")
CITATION = re.compile(r'docs/contract\.md, "([^"]+)"')
MISSING_FILES = re.compile(r"\b(?:CONTRACT|DESIGN)\.md\b")


def project_texts() -> dict[Path, str]:
    """Every hand-written source and doc but this test, which names what it looks for."""
    files = [path for top in SOURCES for path in (ROOT / top).rglob("*.py")]
    files += [*(ROOT / "docs").glob("*.md"), ROOT / "README.md", ROOT / "CHANGELOG.md"]
    this_file = Path(__file__).resolve()
    return {path: path.read_text(encoding="utf-8") for path in files if path != this_file}


def test_every_cited_section_of_the_contract_notes_exists() -> None:
    sections = set(re.findall(r"^## (.+)$", CONTRACT_NOTES.read_text(), flags=re.MULTILINE))
    cited = {
        (path.relative_to(ROOT).as_posix(), section)
        for path, text in project_texts().items()
        for section in CITATION.findall(text)
    }
    assert cited, "nothing cites docs/contract.md"
    assert {(where, section) for where, section in cited if section not in sections} == set()


def test_nothing_points_at_contract_files_outside_the_repository() -> None:
    pointing = {
        path.relative_to(ROOT).as_posix()
        for path, text in project_texts().items()
        if MISSING_FILES.search(text)
    }
    assert pointing == set()
