from san_jobs.ai_gateway.backends.local.til import clean_note, generate_til, merge_repeats

NOTES_EN = [
    "- Postgres SKIP LOCKED lets workers claim jobs without blocking",
    "postgres skip locked lets workers claim jobs without blocking",
    "Sourdough bread needs a mature starter and a long rise",
    "A worker lease expires and the job returns to the queue",
    "Bread dough rises faster in a warm kitchen",
]
NOTES_KO = [
    "트랜잭션 격리 수준은 동시성 문제를 막는다",
    "* 트랜잭션 격리 수준은 동시성 문제를 막는다",
    "빵 반죽은 따뜻한 곳에서 잘 부푼다",
    "격리 수준이 높을수록 트랜잭션 충돌이 많아진다",
]


def test_clean_note_removes_bullets() -> None:
    assert clean_note("  - hello   world ") == "hello world"
    assert clean_note("3) third") == "third"


def test_repeats_are_merged_with_a_count() -> None:
    merged = merge_repeats(NOTES_EN)
    assert len(merged) == 4
    assert merged[0].count == 2


def test_english_til_groups_topics() -> None:
    title, body = generate_til("2024-05-01", NOTES_EN)
    assert title.startswith("TIL 2024-05-01")
    assert body.count("## ") == 2
    sections = body.split("## ")[1:]
    queue = next(s for s in sections if "SKIP LOCKED" in s)
    assert "lease expires" in queue
    assert "(×2)" in queue
    bread = next(s for s in sections if "Sourdough" in s)
    assert "warm kitchen" in bread
    assert body.count("SKIP LOCKED") == 1


def test_korean_til_groups_topics() -> None:
    title, body = generate_til("2024-05-02", NOTES_KO)
    assert title.startswith("TIL 2024-05-02")
    assert "트랜잭션" in title or "격리" in title or "수준" in title
    sections = body.split("## ")[1:]
    assert len(sections) == 2
    isolation = next(s for s in sections if "동시성" in s)
    assert "충돌" in isolation
    assert "(×2)" in isolation


def test_single_note() -> None:
    _title, body = generate_til("2024-01-01", ["Learned about gRPC deadlines"])
    assert "gRPC deadlines" in body
    assert body.startswith("## ")
