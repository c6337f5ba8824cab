"""A cheap, documented estimate of how many model tokens a text costs.

BPE tokenisers (GPT-style) spend about one token per four characters of English and
other Latin-script text, but close to one token per Hangul syllable or CJK character
(often more). The estimate therefore counts:

* each Hangul syllable, Hangul jamo, CJK ideograph or kana as one token;
* every other character (Latin letters, digits, spaces, punctuation) as a quarter token,
  rounded up over the whole text.

It is deliberately a little generous for Korean so the gateway refuses an input before
the upstream model does, and it costs one pass over the text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

# Hangul syllables, Hangul jamo (+ compatibility jamo), CJK ideographs, hiragana/katakana.
_WIDE = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f\u4e00-\u9fff\u3040-\u30ff]")

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Estimated model tokens for ``text`` (see the module docstring for the rule)."""
    wide = len(_WIDE.findall(text))
    narrow = len(text) - wide
    return wide + math.ceil(narrow / CHARS_PER_TOKEN)


def estimate_tokens_all(texts: Iterable[str]) -> int:
    """Estimated model tokens for several texts sent together."""
    return sum(estimate_tokens(t) for t in texts)
