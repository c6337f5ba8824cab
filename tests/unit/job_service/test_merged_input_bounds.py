"""The dependencies' results merged into a job's input are bounded as an Enqueue's own
input is (issue 42, point 3): forty TILs of 120 KB each made a recall's stored input
4.75 MB, and GetJob and every ListJobs page holding it answered RESOURCE_EXHAUSTED."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from san_jobs.job_service.domain.dependencies import MIN_USEFUL_CHARS, Finished, merged_input
from san_jobs.job_service.domain.limits import (
    DEFAULT_MAX_TEXT_CHARS,
    MAX_RECALL_SOURCES,
    MAX_TIL_NOTES,
)
from san_jobs.job_service.domain.model import JobType

START = datetime(2026, 12, 7, tzinfo=UTC)


def til(index: int, body: str) -> Finished:
    return Finished(
        job_id=f"til-{index:03d}",
        job_type=JobType.TIL_GENERATION,
        completed_at=START + timedelta(seconds=index),
        result={"title": f"TIL {index}", "body": body},
        input={},
    )


def card(index: int, summary: str) -> Finished:
    return Finished(
        job_id=f"card-{index:04d}",
        job_type=JobType.CARD_ANALYSIS,
        completed_at=START + timedelta(seconds=index),
        result={"summary": summary},
        input={"title": f"Card {index}"},
    )


def test_forty_big_tils_make_a_recall_input_within_the_bound() -> None:
    tils = [til(i, "x" * 120_000) for i in range(40)]
    merged = merged_input(JobType.RECALL_GENERATION, {"question_count": 5}, tils)
    sources = merged["sources"]
    assert sum(len(s["text"]) for s in sources) == DEFAULT_MAX_TEXT_CHARS
    assert [s["job_id"] for s in sources] == ["til-000"]  # the first, cut to what fits
    assert merged["question_count"] == 5


def test_what_fits_is_kept_in_completion_order_and_a_sliver_is_left_out() -> None:
    own = {"title": "mine", "text": "y" * 1_000}
    fits = DEFAULT_MAX_TEXT_CHARS - 1_000 - (MIN_USEFUL_CHARS - 1)
    dependencies = [card(2, "b" * 50_000), card(1, "a" * (fits - 50_000)), card(3, "c" * 5_000)]
    merged = merged_input(JobType.RECALL_GENERATION, {"sources": [own]}, dependencies)
    texts = [s["text"][0] for s in merged["sources"]]
    assert texts == ["y", "a", "b"]  # card 3 would have had fewer than 199 characters


def test_a_til_takes_at_most_the_notes_an_enqueue_may_hold() -> None:
    cards = [card(i, f"Summary {i}.") for i in range(MAX_TIL_NOTES + 50)]
    merged = merged_input(JobType.TIL_GENERATION, {"day": "2026-12-07", "notes": ["own"]}, cards)
    assert len(merged["notes"]) == MAX_TIL_NOTES
    assert merged["notes"][:2] == ["own", "Summary 0."]


def test_a_recall_takes_at_most_the_sources_an_enqueue_may_hold() -> None:
    cards = [card(i, f"Summary {i}.") for i in range(MAX_RECALL_SOURCES + 5)]
    merged = merged_input(JobType.RECALL_GENERATION, {}, cards)
    assert len(merged["sources"]) == MAX_RECALL_SOURCES


def test_small_days_are_merged_whole() -> None:
    cards = [card(i, f"Summary {i}.") for i in range(5)]
    merged = merged_input(JobType.TIL_GENERATION, {"day": "2026-12-07"}, cards)
    assert merged["notes"] == [f"Summary {i}." for i in range(5)]


def test_a_cards_tags_become_its_sources_key_terms_bounded() -> None:
    """Issue 43: the quiz blanks a card's tags first; JobService passes them on as
    the source's key_terms, within an Enqueue's bounds (20, 100 characters each),
    leaving out what is not a usable term."""
    tagged = Finished(
        job_id="card-tagged",
        job_type=JobType.CARD_ANALYSIS,
        completed_at=START,
        result={
            "summary": "Fencing tokens stop the old worker.",
            "tags": [
                "fencing tokens",
                "",
                "x" * 150,
                7,
                "bad\x00tag",
                *[f"t{i}" for i in range(30)],
            ],
        },
        input={"title": "Fencing"},
    )
    merged = merged_input(JobType.RECALL_GENERATION, {"sources": []}, [tagged, card(1, "Plain.")])
    first, second = merged["sources"]
    assert first["key_terms"][:2] == ["fencing tokens", "x" * 100]
    assert len(first["key_terms"]) == 20 and all(0 < len(t) <= 100 for t in first["key_terms"])
    assert "key_terms" not in second  # a card without tags
