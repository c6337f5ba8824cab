"""Embeddings by feature hashing: words and character n-grams into a fixed-size vector.

Each text becomes a bag of features (word stems, plus character trigrams of English
words and syllable bigrams of Korean words), weighted by sublinear term frequency and
hashed (CRC-32, with a sign bit to cancel collisions on average) into ``DIMENSION``
buckets, then scaled to unit length. Texts that share vocabulary are close; texts that
share none are near-orthogonal. It captures topic by shared words only: synonyms
("car"/"automobile") and translations ("database"/"데이터베이스") are not close.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict

import numpy as np

from san_jobs.ai_gateway.backends.local.graph import FloatArray
from san_jobs.ai_gateway.backends.local.text import Token, tokenize

DIMENSION = 256
# Sub-word features smooth over spelling variants and Korean endings we failed to strip.
_NGRAM_WEIGHT = 0.35
_EMPTY_FEATURE = "\x00empty"


def features(tokens: list[Token]) -> dict[str, float]:
    """The weighted features of a token list (content words only)."""
    counts: dict[str, float] = defaultdict(float)
    for tok in tokens:
        if not tok.content:
            continue
        counts["w:" + tok.key] += 1.0
        grams = _syllable_bigrams(tok.key) if tok.korean else _char_trigrams(tok.key)
        if grams:
            share = _NGRAM_WEIGHT / len(grams)
            for gram in grams:
                counts["g:" + gram] += share
    return counts


def embed(text: str) -> FloatArray:
    """A unit-length ``DIMENSION``-vector for ``text`` (deterministic across runs)."""
    counts = features(tokenize(text))
    if not counts:
        # Only stopwords or symbols: still a valid unit vector, the same for all such texts.
        counts[_EMPTY_FEATURE] = 1.0
    vector = np.zeros(DIMENSION)
    for feature, count in counts.items():
        weight = 1.0 + math.log(count) if count >= 1.0 else count
        digest = zlib.crc32(feature.encode("utf-8"))
        sign = 1.0 if digest & 0x80000000 else -1.0
        vector[digest % DIMENSION] += sign * weight
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:  # every feature cancelled out (vanishingly rare)
        vector[zlib.crc32(text.encode("utf-8")) % DIMENSION] = 1.0
        return vector
    result: FloatArray = vector / norm
    return result


def cosine(a: FloatArray, b: FloatArray) -> float:
    """Cosine similarity of two vectors (for unit vectors, their dot product)."""
    denominator = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / denominator if denominator else 0.0


def _char_trigrams(word: str) -> list[str]:
    padded = f"<{word}>"
    return [padded[i : i + 3] for i in range(len(padded) - 2)]


def _syllable_bigrams(word: str) -> list[str]:
    return [word[i : i + 2] for i in range(len(word) - 1)]
