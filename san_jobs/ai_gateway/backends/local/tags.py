"""Keyword tags: TextRank over a word co-occurrence graph.

Candidate words are the non-stopword stems (English and Korean stopword lists, Korean
particles stripped). Two candidates are linked when they occur within a few words of
each other; PageRank over that graph, times a small frequency factor and a boost for
words of the title, ranks them. Tags are single words: multi-word phrases ("job queue")
come out as two tags.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from san_jobs.ai_gateway.backends.local.graph import pagerank
from san_jobs.ai_gateway.backends.local.text import Token, tokenize

MIN_TAGS = 3
MAX_TAGS = 8
WINDOW = 4


def tag_count(distinct_candidates: int) -> int:
    """How many tags to return: 3, plus one per 25 distinct candidate words, at most 8."""
    return min(MAX_TAGS, MIN_TAGS + distinct_candidates // 25)


def rank_keywords(text: str, title: str = "") -> list[tuple[str, float]]:
    """(display form, score) of every candidate keyword of ``text``, best first."""
    tokens = tokenize(text)
    candidates = [t for t in tokens if t.content]
    if not candidates:
        return []
    index: dict[str, int] = {}
    for tok in candidates:
        index.setdefault(tok.key, len(index))
    weights = np.zeros((len(index), len(index)))
    ids = [index[t.key] for t in candidates]
    for pos, a in enumerate(ids):
        for b in ids[pos + 1 : pos + WINDOW]:
            if a != b:
                weights[a, b] += 1.0
                weights[b, a] += 1.0
    scores = pagerank(weights)
    counts = Counter(ids)
    title_keys = {t.key for t in tokenize(title) if t.content}
    display = _display_forms(candidates)
    ranked: list[tuple[str, float]] = []
    for key, i in index.items():
        score = float(scores[i]) * (1.0 + math.log(counts[i]))
        if key in title_keys:
            score *= 1.5
        ranked.append((display[key], score))
    # Stable by first occurrence on ties: dict order is insertion order.
    ranked.sort(key=lambda pair: -pair[1])
    return ranked


def extract_tags(text: str, title: str = "") -> list[str]:
    """3 to 8 keyword tags for ``text`` (fewer only if it has fewer distinct words)."""
    ranked = rank_keywords(text, title)
    tags = [word for word, _ in ranked[: tag_count(len(ranked))]]
    if len(tags) < MIN_TAGS:
        tags += _fallback_words(text, exclude=set(tags), need=MIN_TAGS - len(tags))
    return tags


def _display_forms(tokens: list[Token]) -> dict[str, str]:
    """Per stem, how to show it: the stem for Korean, the most frequent spelling for English."""
    spellings: dict[str, Counter[str]] = {}
    for tok in tokens:
        spellings.setdefault(tok.key, Counter())[tok.key if tok.korean else tok.surface] += 1
    return {key: counter.most_common(1)[0][0] for key, counter in spellings.items()}


def _fallback_words(text: str, exclude: set[str], need: int) -> list[str]:
    """For very short texts: any remaining words, stopwords included, in order."""
    words: list[str] = []
    for tok in tokenize(text):
        if tok.key not in exclude and tok.key not in words and len(words) < need:
            words.append(tok.key)
    return words
