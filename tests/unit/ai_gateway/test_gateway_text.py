from san_jobs.ai_gateway.backends.local.text import (
    content_keys,
    english_stem,
    is_mostly_korean,
    korean_stem,
    split_sentences,
    tokenize,
)
from san_jobs.ai_gateway.model_tokens import estimate_tokens, estimate_tokens_all


def test_split_sentences_english_and_korean() -> None:
    text = "First one. Second one!  Third?\n\n문장 하나입니다. 문장 둘입니다."
    assert split_sentences(text) == [
        "First one.",
        "Second one!",
        "Third?",
        "문장 하나입니다.",
        "문장 둘입니다.",
    ]


def test_split_sentences_keeps_decimals_and_splits_bullets() -> None:
    assert split_sentences("Version 3.5 is out.\n- item one\n- item two") == [
        "Version 3.5 is out.",
        "- item one",
        "- item two",
    ]


def test_korean_particles_are_stripped() -> None:
    assert korean_stem("데이터베이스에서는") == "데이터베이스"
    assert korean_stem("트랜잭션을") == "트랜잭션"
    assert korean_stem("큐는") == "큐"
    assert korean_stem("저장하는") == "저장"
    assert korean_stem("효율적으로") == "효율"
    assert korean_stem("고양이가") == "고양이"
    # Two-syllable nouns ending like a particle survive.
    assert korean_stem("평가") == "평가"
    assert korean_stem("목적") == "목적"


def test_english_plural_stemming() -> None:
    assert english_stem("queues") == "queue"
    assert english_stem("libraries") == "library"
    assert english_stem("classes") == "class"
    assert english_stem("status") == "status"
    assert english_stem("analysis") == "analysis"


def test_tokenize_marks_stopwords_and_predicates() -> None:
    tokens = {t.surface: t for t in tokenize("The workers 그리고 빠르다 데이터베이스를")}
    assert not tokens["the"].content
    assert tokens["workers"].content and tokens["workers"].key == "worker"
    assert not tokens["그리고"].content
    assert not tokens["빠르다"].content
    assert tokens["데이터베이스를"].key == "데이터베이스"


def test_content_keys_mixed_script() -> None:
    assert content_keys("PostgreSQL은 queues를 지원합니다") == ["postgresql", "queue", "지원"]


def test_language_guess() -> None:
    assert is_mostly_korean("작업 큐는 데이터베이스에 있다 (queue)")
    assert not is_mostly_korean("A queue in a database (큐)")


def test_token_estimate_latin_and_hangul() -> None:
    assert estimate_tokens("abcd" * 10) == 10
    assert estimate_tokens("가나다라") == 4
    assert estimate_tokens("가나 abcd") == 2 + 2  # 2 syllables + ceil(5 / 4)
    assert estimate_tokens("") == 0
    assert estimate_tokens_all(["abcd", "가"]) == 2
