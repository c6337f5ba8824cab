"""Recall questions: cloze (fill-in-the-blank) questions from each source's key sentences.

For each source, sentences are ranked with the summariser's TextRank and keywords with
the tagger's; a key sentence becomes a question by blanking its best keyword, which is
the answer. Questions are taken round-robin across sources so each source is asked
about. Every question is a sentence of its source: grounded, but only as deep as the
text's own wording (no "why" questions, no paraphrase).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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
    # English: blank a whole word with the same stem ("jobs" for "job", not "worker"
    # for "work").
    stem = english_stem(keyword.lower())
    for word in _LATIN_WORD.finditer(sentence):
        if english_stem(word.group(0).lower()) == stem:
            return word.start(), word.end()
    return None


def source_questions(index: int, title: str, text: str) -> Iterator[Cloze]:
    """Cloze questions for one source, best sentence first, each keyword blanked once."""
    keywords = [w for w, _ in rank_keywords(text, title)[:KEYWORDS_PER_SOURCE]]
    korean = is_mostly_korean(text)
    used: set[str] = set()
    for ranked in rank_sentences(text, title):
        if len(content_keys(ranked.text)) < MIN_SENTENCE_WORDS - 1:
            continue
        made = make_cloze(clip(ranked.text), [k for k in keywords if k not in used])
        if made is None:
            continue
        cloze, answer, keyword = made
        used.add(keyword)
        yield Cloze(_prompt(cloze, title, korean), answer, index)


def fallback_question(index: int, title: str, text: str) -> Cloze:
    """For a source with no usable sentence: ask for its gist; the summary is the answer."""
    korean = is_mostly_korean(text)
    name = title or clip(text, 60)
    if korean:
        return Cloze(f"'{name}'의 핵심 내용은 무엇인가요?", summarize(text, title), index)
    return Cloze(f"What is the main point of '{name}'?", summarize(text, title), index)


def generate_recall(sources: list[tuple[str, str]], count: int) -> list[Cloze]:
    """Up to ``count`` questions over ``sources`` ((title, text) pairs), round-robin."""
    streams = [source_questions(i, title, text) for i, (title, text) in enumerate(sources)]
    questions: list[Cloze] = []
    asked = [False] * len(sources)
    live = list(range(len(sources)))
    while live and len(questions) < count:
        for i in list(live):
            if len(questions) >= count:
                break
            question = next(streams[i], None)
            if question is None:
                live.remove(i)
                continue
            questions.append(question)
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
