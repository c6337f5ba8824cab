"""A "today I learned" note from a day's notes: repeats merged, notes grouped by topic.

Notes are cleaned (bullets and extra spaces removed), exact and near repeats (same
words, ignoring case and order, Jaccard ≥ 0.8) are merged into one line with a count,
and the rest are grouped greedily by embedding similarity. Each group is headed by its
top keywords. Nothing is paraphrased: every line of the body is one of the notes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from san_jobs.ai_gateway.backends.local.embed import embed
from san_jobs.ai_gateway.backends.local.graph import FloatArray
from san_jobs.ai_gateway.backends.local.tags import rank_keywords
from san_jobs.ai_gateway.backends.local.text import is_mostly_korean, tokenize

# Two notes join a group when their embedding is this close to the group's centroid.
GROUP_SIMILARITY = 0.2
NEAR_DUPLICATE = 0.8
_BULLET = re.compile(r"^\s*(?:[-*•·+]|\d+[.)])\s+")


@dataclass
class Note:
    """A cleaned note and how many times it (or a near repeat) was written."""

    text: str
    words: frozenset[str]
    count: int = 1


@dataclass
class Group:
    """Notes on one topic."""

    notes: list[Note] = field(default_factory=list)
    vectors: list[FloatArray] = field(default_factory=list)

    def centroid(self) -> FloatArray:
        """Mean of the members' embeddings, unit length."""
        mean = np.mean(self.vectors, axis=0)
        norm = float(np.linalg.norm(mean))
        result: FloatArray = mean / norm if norm else mean
        return result


def clean_note(note: str) -> str:
    """``note`` without a leading bullet or number, on one line."""
    return " ".join(_BULLET.sub("", note.strip()).split())


def merge_repeats(notes: list[str]) -> list[Note]:
    """Cleaned notes in first-seen order, exact and near repeats merged (longest kept)."""
    merged: list[Note] = []
    for raw in notes:
        text = clean_note(raw)
        if not text:
            continue
        words = frozenset(t.key for t in tokenize(text)) or frozenset({text.lower()})
        for note in merged:
            if _jaccard(note.words, words) >= NEAR_DUPLICATE:
                note.count += 1
                if len(text) > len(note.text):
                    note.text, note.words = text, words
                break
        else:
            merged.append(Note(text, words))
    return merged


def group_notes(notes: list[Note]) -> list[Group]:
    """Greedy single-pass clustering of notes by embedding similarity."""
    groups: list[Group] = []
    for note in notes:
        vector = embed(note.text)
        best, best_sim = None, GROUP_SIMILARITY
        for group in groups:
            sim = float(group.centroid() @ vector)
            if sim >= best_sim:
                best, best_sim = group, sim
        if best is None:
            best = Group()
            groups.append(best)
        best.notes.append(note)
        best.vectors.append(vector)
    return groups


def heading(group: Group, korean: bool) -> str:
    """A group's heading: its top two keywords, or a generic word."""
    text = "\n".join(n.text for n in group.notes)
    words = [w for w, _ in rank_keywords(text)[:2]]
    if not words:
        return "메모" if korean else "Notes"
    return " · ".join(words)


def generate_til(day: str, notes: list[str]) -> tuple[str, str]:
    """(title, Markdown body) for one day's notes."""
    merged = merge_repeats(notes)
    everything = "\n".join(n.text for n in merged)
    korean = is_mostly_korean(everything)
    top = [w for w, _ in rank_keywords(everything)[:3]]
    title = f"TIL {day}: {', '.join(top)}" if top else f"TIL {day}"
    lines: list[str] = []
    for group in group_notes(merged):
        lines.append(f"## {heading(group, korean)}")
        lines.append("")
        for note in group.notes:
            repeat = f" (×{note.count})" if note.count > 1 else ""
            lines.append(f"- {note.text}{repeat}")
        lines.append("")
    return title, "\n".join(lines).rstrip() + "\n"


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0
