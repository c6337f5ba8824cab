from gateway_texts import EN_QUEUE, KO_BREAD

from san_jobs.ai_gateway.backends.local.recall import (
    BLANK,
    WEAK_WORDS,
    generate_recall,
    key_terms,
    make_cloze,
)


def test_make_cloze_english_blanks_whole_word() -> None:
    made = make_cloze("Workers claim jobs from the queue.", ["job"])
    assert made == ("Workers claim _____ from the queue.", "jobs", "job")


def test_make_cloze_korean_keeps_particle() -> None:
    made = make_cloze("반죽을 오븐에서 굽습니다.", ["오븐"])
    assert made == ("반죽을 _____에서 굽습니다.", "오븐", "오븐")


def test_questions_are_grounded_in_their_source() -> None:
    sources = [("Queues", EN_QUEUE), ("빵", KO_BREAD)]
    questions = generate_recall(sources, 6)
    assert len(questions) == 6
    assert {q.source_index for q in questions} == {0, 1}
    for q in questions:
        title, text = sources[q.source_index]
        assert BLANK in q.question
        # Putting the answer back gives a sentence of the source.
        sentence = q.question.split(": ", 1)[1].replace(BLANK, q.answer, 1)
        assert sentence in text
        assert q.question.startswith(f"[{title}]")
    korean = [q for q in questions if q.source_index == 1]
    assert all("빈칸" in q.question for q in korean)


def test_round_robin_and_distinct_answers() -> None:
    questions = generate_recall([("", EN_QUEUE)], 20)
    answers = [q.answer.lower() for q in questions]
    assert len(answers) == len(set(answers))
    assert 1 <= len(questions) <= 20


def test_source_without_cloze_gets_a_gist_question() -> None:
    questions = generate_recall([("Greeting", "Hi.")], 5)
    assert len(questions) == 1
    assert questions[0].question == "What is the main point of 'Greeting'?"
    assert questions[0].answer == "Hi."


FENCING = (
    "Fencing tokens stop the old worker from writing after its lease expired. A lease "
    "gives one worker a job for a while. The old worker may still be running when the "
    "lease ends, so each write carries a fencing token and the store refuses an old token."
)


def test_the_blank_is_the_key_term_not_a_weak_word() -> None:
    # Issue 43: "Fencing tokens stop the _____ worker ...", answer "old", taught nothing.
    questions = generate_recall([("Leases and fencing", FENCING)], 10)
    assert len(questions) == 3  # one per sentence
    assert questions[0].question.endswith("from writing after its _____ expired.")
    assert questions[0].answer == "lease"
    assert all(q.answer.lower() not in WEAK_WORDS for q in questions)
    # A name inside a sentence ranks before the other keywords.
    assert key_terms("Jobs wait in the Outbox relay until the relay sends jobs.", "")[0] in {
        "Outbox",
        "outbox",
    }


def test_one_question_per_sentence_across_sources() -> None:
    # A day's note repeats its cards' sentences: each is asked about once, and the
    # note, whose sentences were all asked, gets no gist question repeating one.
    note = "- Fencing tokens stop the old worker from writing after its lease expired."
    questions = generate_recall([("Leases and fencing", FENCING), ("Today I learned", note)], 10)
    sentences = [q.question.split(": ", 1)[1].replace(BLANK, q.answer, 1) for q in questions]
    assert len(questions) == 3 and {q.source_index for q in questions} == {0}
    assert len({s.lstrip("- ").lower() for s in sentences}) == len(sentences)


def test_a_sources_given_key_terms_are_blanked_first() -> None:
    # Issue 43: a card's tags are its key terms. Without them the first question of
    # FENCING blanks "lease"; given "fencing tokens" (a phrase) and "worker", those go
    # first, each where a sentence holds it.
    plain = generate_recall([("Leases and fencing", FENCING)], 10)
    tagged = generate_recall(
        [("Leases and fencing", FENCING)], 10, [["fencing tokens", "worker", "  "]]
    )
    assert plain[0].answer == "lease"
    answers = [q.answer for q in tagged]
    assert answers[0].lower() == "fencing tokens", answers
    assert "worker" in [a.lower() for a in answers], answers
    assert len(tagged) == len(plain)  # still one question per sentence
    assert key_terms(FENCING, "", ["Worker"])[0] == "Worker"
    assert key_terms(FENCING, "", ["old"])[0] != "old"  # a weak word stays last


def test_the_gateway_bounds_a_sources_key_terms() -> None:
    from san_jobs.ai_gateway.errors import InvalidRequest
    from san_jobs.ai_gateway.kinds.recall import recall_input
    from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as gw

    def request(*terms: str) -> gw.GenerateRecallRequest:
        source = gw.Source(title="T", text=FENCING, key_terms=list(terms))
        return gw.GenerateRecallRequest(sources=[source])

    assert recall_input(request("lease")).sources[0].key_terms == ("lease",)
    for terms, field in (
        ([f"t{i}" for i in range(21)], "sources[0].key_terms"),
        (["ok", " "], "sources[0].key_terms[1]"),
        (["x" * 101], "sources[0].key_terms[0]"),
    ):
        try:
            recall_input(request(*terms))
        except InvalidRequest as refused:
            assert [v.field for v in refused.violations] == [field], refused.violations
        else:
            raise AssertionError(f"{terms} accepted")
