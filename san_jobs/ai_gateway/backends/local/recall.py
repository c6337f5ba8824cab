"""Recall questions: cloze (fill-in-the-blank) questions from each source's key sentences.

For each source, sentences are ranked with the summariser's TextRank and keywords with
the tagger's; a key sentence becomes a question by blanking its key term (a name, else
its best keyword; a weak word like "old" only when nothing else is there), which is the
answer. Questions are taken round-robin across sources so each source is asked about,
and a sentence several sources hold (a day's note repeats its cards') is asked about
once. Every question is a sentence of its source: grounded, but only as deep as the
text's own wording (no "why" questions, no paraphrase).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from san_jobs.ai_gateway.backends.local.summarize import clip, rank_sentences, summarize
from san_jobs.ai_gateway.backends.local.tags import rank_keywords
from san_jobs.ai_gateway.backends.local.text import content_keys, english_stem, is_mostly_korean

BLANK = "_____"
KEYWORDS_PER_SOURCE = 12
MIN_SENTENCE_WORDS = 4
_HANGUL_START = re.compile(r"[\uac00-\ud7a3]")
_LATIN_WORD = re.compile(r"[A-Za-z0-9]+(?:['-][A-Za-z0-9]+)*")


@dataclass(frozen=True)
class Cloze:
    """A question made from a source: the prompt, the answer, the source's index."""

    question: str
    answer: str
    source_index: int


def make_cloze(sentence: str, keywords: list[str]) -> tuple[str, str, str] | None:
    """(sentence with a keyword blanked, the word blanked, the keyword), best keyword first."""
    for keyword in keywords:
        found = _find_keyword(sentence, keyword)
        if found:
            start, end = found
            return sentence[:start] + BLANK + sentence[end:], sentence[start:end], keyword
    return None


def _find_keyword(sentence: str, keyword: str) -> tuple[int, int] | None:
    if _HANGUL_START.match(keyword):
        # Korean: blank the stem at a word start and keep the particle ("_____는").
        hit = re.search(rf"(?<![\uac00-\ud7a3]){re.escape(keyword)}", sentence)
        return (hit.start(), hit.end()) if hit else None
    if " " in keyword.strip():
        # A term of several words (a card's tag, "fencing token"): the phrase itself.
        hit = re.search(rf"\b{re.escape(keyword.strip())}\b", sentence, re.IGNORECASE)
        return (hit.start(), hit.end()) if hit else None
    # English: blank a whole word with the same stem ("jobs" for "job", not "worker"
    # for "work").
    stem = english_stem(keyword.lower())
    for word in _LATIN_WORD.finditer(sentence):
        if english_stem(word.group(0).lower()) == stem:
            return word.start(), word.end()
    return None


# Words a ranker can score high that make a weak blank ("Fencing tokens stop the
# _____ worker", answer "old"): blanked only when no key term is in the sentence.
WEAK_WORDS = frozenset(
    [
        "old",
        "new",
        "good",
        "bad",
        "big",
        "small",
        "great",
        "little",
        "many",
        "much",
        "more",
        "most",
        "less",
        "least",
        "same",
        "other",
        "first",
        "last",
        "next",
        "long",
        "short",
        "high",
        "low",
        "own",
        "few",
        "several",
        "various",
        "main",
        "certain",
        "whole",
        "able",
        "real",
        "true",
        "false",
        "early",
        "late",
    ]
)
_NAMED = re.compile(r"(?<=[a-z,;:] )[A-Z][A-Za-z0-9-]+")


def key_terms(text: str, title: str, given: Sequence[str] = ()) -> list[str]:
    """The source's keywords, the key terms first: those `given` (a card's tags, in
    their order), then those written as names inside a sentence ("the Outbox relay"),
    then the rest by rank (its title's words rank higher); weak words (WEAK_WORDS,
    Latin words of three letters or fewer but acronyms) last."""
    own = [t.strip() for t in given if t.strip()]
    ranked = own + [
        w
        for w, _ in rank_keywords(text, title)[:KEYWORDS_PER_SOURCE]
        if w.lower() not in {t.lower() for t in own}
    ]
    tagged = {english_stem(t.lower()) for t in own}
    named = {english_stem(m.group(0).lower()) for m in _NAMED.finditer(text)}

    def weight(keyword: str) -> int:
        if _HANGUL_START.match(keyword):
            return 1
        if keyword.lower() in WEAK_WORDS or (len(keyword) <= 3 and not keyword.isupper()):
            return 2
        if english_stem(keyword.lower()) in tagged:
            return -1
        return 0 if english_stem(keyword.lower()) in named else 1

    return sorted(ranked, key=weight)  # stable: by rank within each weight


def _sentence_key(sentence: str) -> str:
    """A sentence as compared across sources (a note's "- " bullet, case and spacing
    aside): one question per sentence, however many sources hold it."""
    return " ".join(_WORD.findall(sentence.lower()))


_WORD = re.compile(r"\w+")


def source_questions(
    index: int, title: str, text: str, given: Sequence[str] = ()
) -> Iterator[Cloze]:
    """Cloze questions for one source, best sentence first, each keyword blanked once."""
    for _, cloze in _keyed_questions(index, title, text, given):
        yield cloze


def _keyed_questions(
    index: int, title: str, text: str, given: Sequence[str] = ()
) -> Iterator[tuple[str, Cloze]]:
    keywords = key_terms(text, title, given)
    korean = is_mostly_korean(text)
    used: set[str] = set()
    for ranked in rank_sentences(text, title):
        if len(content_keys(ranked.text)) < MIN_SENTENCE_WORDS - 1:
            continue
        sentence = clip(ranked.text)
        made = make_cloze(sentence, [k for k in keywords if k not in used])
        if made is None:
            continue
        cloze, answer, keyword = made
        used.add(keyword)
        yield _sentence_key(sentence), Cloze(_prompt(cloze, title, korean), answer, index)


def fallback_question(index: int, title: str, text: str) -> Cloze:
    """For a source with no usable sentence: ask for its gist; the summary is the answer."""
    korean = is_mostly_korean(text)
    name = title or clip(text, 60)
    if korean:
        return Cloze(f"'{name}'의 핵심 내용은 무엇인가요?", summarize(text, title), index)
    return Cloze(f"What is the main point of '{name}'?", summarize(text, title), index)


def generate_recall(
    sources: list[tuple[str, str]], count: int, given: Sequence[Sequence[str]] = ()
) -> list[Cloze]:
    """Up to ``count`` questions over ``sources`` ((title, text) pairs, with ``given``
    key terms per source, a card's tags), round-robin, never two on one sentence (a
    day's note repeats its cards' sentences)."""
    terms = list(given) + [()] * (len(sources) - len(given))
    streams = [
        _keyed_questions(i, title, text, terms[i]) for i, (title, text) in enumerate(sources)
    ]
    questions: list[Cloze] = []
    sentences: set[str] = set()
    asked = [False] * len(sources)
    live = list(range(len(sources)))
    while live and len(questions) < count:
        for i in list(live):
            if len(questions) >= count:
                break
            keyed = next(streams[i], None)
            while keyed is not None and keyed[0] in sentences:
                asked[i] = True  # its sentence was asked about: no gist question either
                keyed = next(streams[i], None)
            if keyed is None:
                live.remove(i)
                continue
            sentences.add(keyed[0])
            questions.append(keyed[1])
            asked[i] = True
    # A source with no cloze still gets one question while there is room.
    for i, (title, text) in enumerate(sources):
        if not asked[i] and len(questions) < count:
            questions.append(fallback_question(i, title, text))
    return questions


def _prompt(cloze: str, title: str, korean: bool) -> str:
    prefix = f"[{title}] " if title else ""
    if korean:
        return f"{prefix}빈칸에 알맞은 말을 쓰세요: {cloze}"
    return f"{prefix}Fill in the blank: {cloze}"
