"""--rate-limit TYPE=N/s and --concurrency-limit TYPE=N: parsed into each limited
type's TypeLimit (domain/claim_limits.py); a wrong one ends job-service in one line."""

from __future__ import annotations

import pytest

from san_jobs.job_service.cli import load_settings
from san_jobs.job_service.domain.claim_limits import TypeLimit, parse_rate
from san_jobs.job_service.domain.model import JobType


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("SAN_JOBS_"):
            monkeypatch.delenv(name)


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as ended:
        load_settings(list(argv))
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") <= 3  # usage line(s) and the one error line
    return err.strip().splitlines()[-1]


def test_no_limits_by_default() -> None:
    assert load_settings([]).claim_limits() == {}


def test_flags_repeat_and_combine_by_type() -> None:
    settings = load_settings(
        [
            "--rate-limit", "card-analysis=20/s",
            "--rate-limit", "EMBEDDING=2.5/s",
            "--concurrency-limit", "CARD_ANALYSIS=5",
            "--concurrency-limit", "til-generation=2",
        ]
    )  # fmt: skip
    assert settings.claim_limits() == {
        JobType.CARD_ANALYSIS: TypeLimit(per_second=20.0, max_running=5),
        JobType.EMBEDDING: TypeLimit(per_second=2.5),
        JobType.TIL_GENERATION: TypeLimit(max_running=2),
    }


def test_environment_holds_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAN_JOBS_RATE_LIMIT", '{"CARD_ANALYSIS": "10/s"}')
    assert load_settings([]).claim_limits() == {JobType.CARD_ANALYSIS: TypeLimit(10.0)}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--rate-limit", "CARD=20/s"], "unknown job type 'CARD'"),
        (["--rate-limit", "CARD_ANALYSIS=20"], "expected N/s"),
        (["--rate-limit", "CARD_ANALYSIS=fast/s"], "expected N/s"),
        (["--rate-limit", "CARD_ANALYSIS=0/s"], "above 0"),
        (["--concurrency-limit", "CARD_ANALYSIS=0"], "at least 1"),
        (["--concurrency-limit", "CARD_ANALYSIS=many"], "whole number"),
        (["--concurrency-limit", "NOPE=3"], "unknown job type 'NOPE'"),
    ],
)
def test_wrong_limits_are_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    line = refusal(capsys, *argv)
    assert says in line and line.startswith("job-service: error: --")


def test_burst_is_a_tenth_of_the_rate_at_least_one() -> None:
    assert TypeLimit(per_second=20).burst == 2
    assert TypeLimit(per_second=10).burst == 1
    assert TypeLimit(per_second=0.5).burst == 1
    assert parse_rate("12.5 / s") == 12.5
