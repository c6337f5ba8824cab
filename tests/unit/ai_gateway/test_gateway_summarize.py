from gateway_texts import EN_QUEUE, KO_QUEUE

from san_jobs.ai_gateway.backends.local.summarize import (
    MAX_SENTENCE_CHARS,
    clip,
    rank_sentences,
    summarize,
    summary_size,
)
from san_jobs.ai_gateway.backends.local.text import split_sentences


def _is_subsequence(parts: list[str], whole: list[str]) -> bool:
    it = iter(whole)
    return all(p in it for p in parts)


def test_summary_picks_at_most_three_sentences_in_order_english() -> None:
    summary = summarize(EN_QUEUE)
    picked = split_sentences(summary)
    assert 1 <= len(picked) <= 3
    assert _is_subsequence(picked, split_sentences(EN_QUEUE))
    # The off-topic sentence is the least central one.
    assert "weather" not in summary
    assert rank_sentences(EN_QUEUE)[-1].text == "The weather was nice that day."


def test_summary_korean_drops_off_topic_sentence() -> None:
    summary = summarize(KO_QUEUE)
    assert 1 <= len(split_sentences(summary)) <= 3
    assert "날씨" not in summary
    assert "작업" in summary
    assert _is_subsequence(split_sentences(summary), split_sentences(KO_QUEUE))


def test_title_pulls_matching_sentence_up() -> None:
    def position(title: str) -> int:
        ranked = [r.text for r in rank_sentences(EN_QUEUE, title)]
        return next(i for i, text in enumerate(ranked) if "lease" in text)

    assert position("Lease expiry") < position("")
    assert "lease" in summarize(EN_QUEUE, "Lease expiry")


def test_short_texts() -> None:
    assert summarize("Only one sentence here.") == "Only one sentence here."
    assert summary_size(0) == 0
    assert summary_size(2) == 1
    assert summary_size(5) == 2
    assert summary_size(50) == 3


def test_long_unpunctuated_text_is_clipped() -> None:
    text = "word " * 2000
    summary = summarize(text)
    assert len(summary) <= MAX_SENTENCE_CHARS + 1
    assert summary.endswith("…")
    assert clip("가" * 1000, 10) == "가" * 10 + "…"


def test_deterministic() -> None:
    assert summarize(EN_QUEUE) == summarize(EN_QUEUE)
