"""Tokenising English and Korean text: sentences, words, stems and stopwords.

Korean has no spaces between a noun and its particle (조사, "josa"): "데이터베이스에서는"
is the noun "데이터베이스" plus "에서는". We strip a list of common particles and of
the endings of "noun + 하다/되다" verbs, keeping at least two syllables of stem so short
nouns survive. This is a heuristic, not a morphological analyser: a noun that happens to
end in a particle-like syllable ("고양이" → "고양") is cut too.

English words get a light plural stemmer (the "S-stemmer"), enough to merge
"queue"/"queues" without the surprises of a full Porter stemmer.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# A sentence ends at . ! ? (plus closing quotes) before whitespace, at a blank line, or
# before a list item. No look-behind: it makes the scan several times slower.
_SENTENCE_END = re.compile(r"([.!?。！？…][\"'”’)\]]*)\s+|\n\s*\n|\n(?=\s*[-*•#\d])")
_WORD = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*|[\uac00-\ud7a3]+")


def _words(text: str) -> list[str]:
    # Word lists are written as text blocks: easier to read and extend than list literals.
    return text.split()


_HANGUL = re.compile(r"[\uac00-\ud7a3]")
_LATIN = re.compile(r"[A-Za-z]")

ENGLISH_STOPWORDS = frozenset(
    _words(
        """
    a about above after again against all almost also although always am among an and
    another any anyone anything are aren't around as at be became because become been
    before being below between both but by can cannot could did didn't do does doesn't
    doing don't done down during each either else enough etc even ever every few first
    for from further get gets getting given gives go goes going got had has hasn't have
    haven't having he her here hers herself him himself his how however i if in into is
    isn't it it's its itself just last least less let like made make makes making many
    may me might more most much must my myself need needs never new next no nor not
    nothing now of off often on once one only onto or other others our ours ourselves out
    over own per perhaps put quite rather really same see seen several shall she should
    since so some something still such than that that's the their theirs them themselves
    then there these they thing things this those though through thus to too two under
    until up upon us use used uses using very via was wasn't way we well were weren't what
    when where whether which while who whom whose why will with within without would yet
    you your yours yourself e.g i.e vs
    """
    )
)

KOREAN_STOPWORDS = frozenset(
    _words(
        """
    그리고 그러나 하지만 그런데 그래서 또한 또는 및 등 등등 것 수 이 그 저 이것 그것 저것
    여기 거기 저기 우리 저희 나 너 그녀 그들 때 중 위 통해 위해 대해 대한 관한 관해 따라 따른
    같은 같이 매우 아주 너무 정말 가장 더 덜 많이 많은 모든 각 어떤 이런 그런 저런 있다 없다
    하다 되다 이다 아니다 있는 없는 있고 없고 있어 있을 경우 때문 때문에 오늘 내일 어제 뿐 정도
    무엇 어디 언제 누구 왜 어떻게 다른 다시 먼저 이제 지금 바로 함께 서로 각각 자신 하나 모두
    대부분 일부 전체 이번 다음 이후 이전 만약 혹은 즉 곧 좀 잘 못 안 수도 것이 것을 것은 것도
    동안 그때 이때 때로 가지 통한 위한 대로 만큼
    """
    )
)

# Particles that are rarely the end of a noun: strip them even from a one-syllable stem
# ("큐는" → "큐"). Longest first, so "에서는" wins over "는".
_SAFE_SUFFIXES = tuple(
    sorted(
        _words(
            """
        에서부터 으로부터 에서는 에서도 에서만 에게는 에게서 으로는 으로도 으로써 으로서 이라는
        이라고 까지는 부터는 에서 에게 한테 으로 까지 부터 처럼 보다 마다 조차 라는 라고 은 는 을 를
        입니다 이었다 였습니다 이었습니다
            """
        ),
        key=len,
        reverse=True,
    )
)
# Endings that also end ordinary nouns ("고양이", "평가", "목적"): keep 2 syllables of stem.
_RISKY_SUFFIXES = tuple(
    sorted(
        _words(
            """
        이나 이며 이고 이다 와 과 이 가 에 의 도 만 로 였다
        했습니다 합니다 됩니다 되었다 되는 되어 된다 된 하는 하고 하여 해서 하면 하지 한다 했다
        하기 하게 할 한 함 하며 적인 적으로 적 들은 들이 들을 들의 들
            """
        ),
        key=len,
        reverse=True,
    )
)

# Word-final endings of predicates and their modifier forms ("빠르다", "뜨거운"): not tags.
_PREDICATE_ENDINGS = ("다", "니다", "요", "죠", "운", "려면", "게", "린")


@dataclass(frozen=True)
class Token:
    """One word: ``key`` is what gets counted (stem), ``surface`` how it was written."""

    key: str
    surface: str
    korean: bool
    content: bool  # a candidate keyword: not a stopword, not a predicate, long enough


def is_mostly_korean(text: str) -> bool:
    """True when Hangul syllables outnumber Latin letters (a language guess)."""
    return len(_HANGUL.findall(text)) > len(_LATIN.findall(text)) / 2


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: split after . ! ? (and CJK marks) or at paragraph breaks."""
    text = text.strip()
    parts: list[str] = []
    start = 0
    for end in _SENTENCE_END.finditer(text):
        # Keep the end mark (group 1) with its sentence; drop the whitespace.
        parts.append(text[start : end.end(1) if end.group(1) else end.start()])
        start = end.end()
    parts.append(text[start:])
    return [" ".join(p.split()) for p in parts if p.strip()]


def english_stem(word: str) -> str:
    """The S-stemmer: plural to singular for regular English plurals."""
    if len(word) > 4 and word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith("sses"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is", "'s")):
        return word[:-1]
    if word.endswith("'s"):
        return word[:-2]
    return word


def korean_stem(word: str) -> str:
    """``word`` without a trailing particle or verb ending, keeping at least 2 syllables."""
    best = ""
    for suffixes, min_stem in ((_SAFE_SUFFIXES, 1), (_RISKY_SUFFIXES, 2)):
        for suffix in suffixes:
            if len(suffix) > len(best) and word.endswith(suffix):
                if len(word) - len(suffix) >= min_stem:
                    best = suffix
                break
    return word[: -len(best)] if best else word


def tokenize(text: str) -> list[Token]:
    """Words of ``text`` in order, lowercased, with stems and a keyword-candidate flag."""
    return [_word_token(word) for word in _WORD.findall(text.lower())]


# Words repeat a lot within and across texts; stemming each distinct word once makes
# tokenising a 20 KB text several times cheaper. Bounded, so memory stays flat.
@functools.lru_cache(maxsize=65536)
def _word_token(word: str) -> Token:
    if _HANGUL.match(word):
        return _korean_token(word)
    key = english_stem(word)
    content = (
        len(key) >= 2
        and not key.isdigit()
        and word not in ENGLISH_STOPWORDS
        and key not in ENGLISH_STOPWORDS
    )
    return Token(key, word, False, content)


def _korean_token(word: str) -> Token:
    if word in KOREAN_STOPWORDS:
        return Token(word, word, True, False)
    key = korean_stem(word)
    predicate = key == word and len(word) >= 3 and word.endswith(_PREDICATE_ENDINGS)
    content = len(key) >= 2 and key not in KOREAN_STOPWORDS and not predicate
    return Token(key, word, True, content)


def content_keys(text: str) -> list[str]:
    """The stems of the keyword candidates of ``text``, in order."""
    return [t.key for t in tokenize(text) if t.content]
