"""CI detection (tests.support.ci): every true-ish spelling of CI counts, nothing else does;
under CI a missing requirement fails the test instead of skipping it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.ci import running_in_ci, skip_or_fail_in_ci


@pytest.mark.parametrize(
    "value", ["true", "True", "TRUE", "1", "yes", "Yes", "on", "ON", " true\n"]
)
def test_true_ish_values_mean_ci(value: str) -> None:
    assert running_in_ci({"CI": value})


@pytest.mark.parametrize("value", ["", "false", "0", "no", "off", "truthy", "2"])
def test_other_values_do_not(value: str) -> None:
    assert not running_in_ci({"CI": value})


def test_no_variable_is_not_ci() -> None:
    assert not running_in_ci({})


def test_it_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")
    assert running_in_ci()
    monkeypatch.delenv("CI")
    assert not running_in_ci()


# Both outcomes are caught and told apart: a skip escaping a test would show the test
# as skipped, not failed.
OUTCOMES = (pytest.fail.Exception, pytest.skip.Exception)


def test_a_missing_requirement_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "yes")
    with pytest.raises(OUTCOMES, match="buf is missing") as outcome:
        skip_or_fail_in_ci("buf is missing")
    assert outcome.type is pytest.fail.Exception


def test_a_missing_requirement_skips_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(OUTCOMES, match="buf is missing") as outcome:
        skip_or_fail_in_ci("buf is missing")
    assert outcome.type is pytest.skip.Exception


def test_the_ci_entry_point_sets_ci_itself() -> None:
    """.ci/run does not rely on the CI system's spelling: it exports CI=true before
    running the tests."""
    lines = (Path(__file__).resolve().parents[3] / ".ci" / "run").read_text().splitlines()
    assert "export CI=true" in lines
    assert lines.index("export CI=true") < lines.index("make test")
