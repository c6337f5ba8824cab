"""Extractive summaries: TextRank over TF-IDF sentence similarity.

Each sentence becomes a TF-IDF vector of its word stems (the "documents" for IDF are
the sentences of the text itself); sentences that share rare words with many others
are central. The summary is the top sentences, at most three, in their original order.
It never writes a new sentence: it can only pick ones the author wrote.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from san_jobs.ai_gateway.backends.local.graph import FloatArray, pagerank
from san_jobs.ai_gateway.backends.local.text import content_keys, split_sentences

MAX_SENTENCES = 3
# A "sentence" of 20 KB (a text with no punctuation) would make a useless summary.
MAX_SENTENCE_CHARS = 400


@dataclass(frozen=True)
class RankedSentence:
    """A sentence, its position in the text and its centrality score."""

    index: int
    text: str
    score: float


def tfidf_matrix(docs: list[list[str]]) -> FloatArray:
    """Row-normalised TF-IDF vectors (sublinear tf, smoothed idf) of tokenised docs."""
    vocab: dict[str, int] = {}
    for doc in docs:
        for key in doc:
            vocab.setdefault(key, len(vocab))
    matrix = np.zeros((len(docs), max(1, len(vocab))))
    for row, doc in enumerate(docs):
        for key in doc:
            matrix[row, vocab[key]] += 1.0
    matrix = np.where(matrix > 0, 1.0 + np.log(np.maximum(matrix, 1.0)), 0.0)
    df = (matrix > 0).sum(axis=0)
    idf = np.log((1.0 + len(docs)) / (1.0 + df)) + 1.0
    matrix *= idf
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    result: FloatArray = matrix / np.where(norms > 0, norms, 1.0)
    return result


def rank_sentences(text: str, title: str = "") -> list[RankedSentence]:
    """Sentences of ``text`` with TextRank scores, best first (ties: earlier first)."""
    sentences = split_sentences(text)
    if not sentences:
        return []
    keys = [content_keys(s) for s in sentences]
    if len(sentences) == 1:
        return [RankedSentence(0, sentences[0], 1.0)]
    vectors = tfidf_matrix([*keys, content_keys(title)])
    sent_vecs, title_vec = vectors[:-1], vectors[-1]
    similarity = sent_vecs @ sent_vecs.T
    np.fill_diagonal(similarity, 0.0)
    scores = pagerank(similarity) * len(sentences)
    # Why the adjustments: the lead sentence often states the topic; a sentence echoing
    # the title is on topic; very short fragments ("Yes.") make poor summaries.
    scores = scores + 1.0 * (sent_vecs @ title_vec)
    scores[0] += 0.15
    short = np.array([len(k) < 3 for k in keys])
    scores = np.where(short, scores * 0.5, scores)
    order = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
    return [RankedSentence(i, sentences[i], float(scores[i])) for i in order]


def summary_size(sentence_count: int) -> int:
    """How many sentences to keep: 1 for ≤2 sentences, 2 for ≤5, else 3."""
    if sentence_count <= 2:
        return 1 if sentence_count else 0
    return 2 if sentence_count <= 5 else MAX_SENTENCES


def summarize(text: str, title: str = "") -> str:
    """An extractive summary of ``text``: at most three of its sentences, in order."""
    ranked = rank_sentences(text, title)
    chosen = sorted(ranked[: summary_size(len(ranked))], key=lambda r: r.index)
    return " ".join(clip(r.text) for r in chosen)


def clip(sentence: str, limit: int = MAX_SENTENCE_CHARS) -> str:
    """``sentence`` cut at a word boundary to at most ``limit`` characters, with "…"."""
    if len(sentence) <= limit:
        return sentence
    cut = sentence[:limit].rsplit(" ", 1)[0]
    if len(cut) < limit // 2:  # no spaces (e.g. unspaced text): cut hard
        cut = sentence[:limit]
    return cut.rstrip() + "…"
