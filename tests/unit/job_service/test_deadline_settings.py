"""Gateway deadlines per job type: --deadline, else --deadline-for, else the legacy
SAN_JOBS_DEADLINE_<TYPE>, else the registry's default."""

from __future__ import annotations

import pytest

from san_jobs.job_service.cli import load_settings
from san_jobs.job_service.domain.job_types import JOB_TYPES, JobType
from san_jobs.job_service.settings import JobServiceSettings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("SAN_JOBS_"):
            monkeypatch.delenv(name)


def from_flags(*argv: str) -> JobServiceSettings:
    return load_settings(list(argv))


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line job-service ends with (exit code 2) for these flags."""
    with pytest.raises(SystemExit) as ended:
        from_flags(*argv)
    assert ended.value.code == 2
    return capsys.readouterr().err


def test_each_type_defaults_to_its_registry_entry() -> None:
    assert from_flags().deadlines() == {t: s.default_deadline for t, s in JOB_TYPES.items()}


def test_deadline_for_sets_one_type_and_leaves_the_others() -> None:
    settings = from_flags(
        "--deadline-for", "til-generation=90", "--deadline-for", "CARD_ANALYSIS=5"
    )
    assert settings.deadline_for == {"TIL_GENERATION": 90.0, "CARD_ANALYSIS": 5.0}
    deadlines = settings.deadlines()
    assert deadlines[JobType.TIL_GENERATION] == 90.0
    assert deadlines[JobType.CARD_ANALYSIS] == 5.0
    assert (
        deadlines[JobType.RECALL_GENERATION]
        == JOB_TYPES[JobType.RECALL_GENERATION].default_deadline
    )


def test_the_variable_is_a_json_object_merged_under_the_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SAN_JOBS_DEADLINE_FOR", '{"recall-generation": 8, "CARD_ANALYSIS": 9}')
    assert from_flags().deadline_for == {"RECALL_GENERATION": 8.0, "CARD_ANALYSIS": 9.0}
    # A flag's type wins over the variable's; the variable's other types stay.
    assert from_flags("--deadline-for", "card-analysis=3").deadline_for == {
        "RECALL_GENERATION": 8.0,
        "CARD_ANALYSIS": 3.0,
    }


def test_the_legacy_variables_still_count_below_deadline_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SAN_JOBS_DEADLINE_CARD_ANALYSIS", "12")
    monkeypatch.setenv("SAN_JOBS_DEADLINE_TIL_GENERATION", "13")
    deadlines = from_flags("--deadline-for", "til_generation=14").deadlines()
    assert deadlines[JobType.CARD_ANALYSIS] == 12.0
    assert deadlines[JobType.TIL_GENERATION] == 14.0
    # --deadline beats everything.
    assert set(from_flags("--deadline", "2").deadlines().values()) == {2.0}


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("NOT_A_TYPE=5", "unknown job type 'NOT_A_TYPE'"),
        ("CARD_ANALYSIS=0", "above 0"),
        ("CARD_ANALYSIS=-1", "above 0"),
        ("CARD_ANALYSIS=soon", "not a number"),
        ("CARD_ANALYSIS=nan", "above 0"),
        ("CARD_ANALYSIS", "'CARD_ANALYSIS'"),  # no =SECONDS: refused by the parser
    ],
)
def test_a_bad_deadline_for_is_refused_naming_the_problem(
    capsys: pytest.CaptureFixture[str], value: str, words: str
) -> None:
    line = refusal(capsys, "--deadline-for", value)
    assert "--deadline-for" in line and words in line


def test_a_bad_legacy_variable_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SAN_JOBS_DEADLINE_RECALL_GENERATION", "-3")
    assert "SAN_JOBS_DEADLINE_RECALL_GENERATION" in refusal(capsys)
