from gateway_texts import EN_BREAD, EN_QUEUE, KO_BREAD, KO_QUEUE

from san_jobs.ai_gateway.backends.local.tags import (
    MAX_TAGS,
    MIN_TAGS,
    extract_tags,
    rank_keywords,
    tag_count,
)


def test_english_tags_are_topic_words_without_stopwords() -> None:
    tags = extract_tags(EN_QUEUE)
    assert MIN_TAGS <= len(tags) <= MAX_TAGS
    assert {"job", "worker"} <= set(tags)
    assert not {"the", "a", "each", "its"} & set(tags)


def test_english_bread() -> None:
    tags = extract_tags(EN_BREAD)
    assert "dough" in tags
    assert MIN_TAGS <= len(tags) <= MAX_TAGS


def test_korean_tags_are_stems_without_particles() -> None:
    tags = extract_tags(KO_QUEUE)
    assert MIN_TAGS <= len(tags) <= MAX_TAGS
    assert {"작업", "워커"} <= set(tags)
    # No particle left on a tag, no stopword.
    assert not any(t.endswith(("을", "를", "는", "은", "에서")) for t in tags)
    assert "그리고" not in tags


def test_korean_bread() -> None:
    tags = extract_tags(KO_BREAD)
    assert "반죽" in tags
    assert "동안" not in tags


def test_title_words_are_boosted() -> None:
    def position(title: str) -> int:
        return [w for w, _ in rank_keywords(EN_BREAD, title)].index("crust")

    assert position("Golden crust") < position("")


def test_tag_count_bounds() -> None:
    assert tag_count(0) == MIN_TAGS
    assert tag_count(1000) == MAX_TAGS
    long_text = " ".join(f"topic{i} detail{i} aspect{i}." for i in range(200))
    assert len(extract_tags(long_text)) == MAX_TAGS


def test_very_short_text_falls_back_to_its_words() -> None:
    assert extract_tags("Hello world") == ["hello", "world"]
    assert len(extract_tags("Queues, workers, leases and the rest")) == 3
