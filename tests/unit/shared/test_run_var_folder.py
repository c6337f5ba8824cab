"""`make run`'s ./var/ is made private to its owner: the services warn about a folder
of SQLite files that others can read, and a fresh `make run` must not start with
two such warnings."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from san_jobs.shared.sqlite_files import prepare_sqlite_file
from scripts.run import make_var_folder


def test_a_new_var_folder_is_private_and_its_databases_warn_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    previous = os.umask(0o022)  # the usual umask, which makes folders 0755
    try:
        folder = make_var_folder(tmp_path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    with caplog.at_level(logging.WARNING, logger="san_shared.sqlite_files"):
        prepare_sqlite_file(str(folder / "jobs.db"))
        prepare_sqlite_file(str(folder / "san-web.db"))
    assert caplog.records == []


def test_an_existing_var_folder_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "var").mkdir(mode=0o750)
    (tmp_path / "var").chmod(0o750)
    assert stat.S_IMODE(make_var_folder(tmp_path).stat().st_mode) == 0o750
