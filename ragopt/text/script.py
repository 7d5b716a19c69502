"""Script detection: how much of a text is written in Han characters, or in any CJK script.

The analyzer a corpus gets when none is set, and the warning that an English-only embedder meets a mostly
CJK corpus, both come from these shares, counted over letters (digits, spaces and punctuation do not count).
"""

from __future__ import annotations

import re
from typing import Iterable

# Han ideographs: CJK Unified (with extensions A and B-F), compatibility ideographs.
HAN_CLASS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
# Punctuation written in Chinese text: CJK symbols, full-width forms, curly quotes, the ellipsis.
CJK_PUNCT_CLASS = "\u3000-\u303f\uff00-\uffef\u2018-\u201f\u2026"
# Han plus the scripts written beside it: kana (Japanese) and hangul (Korean).
CJK_CLASS = HAN_CLASS + "\u3040-\u30ff\u31f0-\u31ff\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"

_LETTER = re.compile(r"[^\W\d_]")
_HAN = re.compile(f"[{HAN_CLASS}]")
_CJK = re.compile(f"[{CJK_CLASS}]")
HAN_RUN = re.compile(f"[{HAN_CLASS}]+")

SAMPLE_CHARS = 2000  # per text: enough to tell the script, cheap on a large corpus


class ScriptShare:
    """Letters counted over some texts (each text's first SAMPLE_CHARS characters)."""

    def __init__(self, texts: Iterable[str]):
        self.letters = self.han = self.cjk = 0
        for text in texts:
            sample = text[:SAMPLE_CHARS]
            self.letters += len(_LETTER.findall(sample))
            self.han += len(_HAN.findall(sample))
            self.cjk += len(_CJK.findall(sample))

    @property
    def han_share(self) -> float:
        return self.han / self.letters if self.letters else 0.0

    @property
    def cjk_share(self) -> float:
        return self.cjk / self.letters if self.letters else 0.0


def has_han(text: str) -> bool:
    return _HAN.search(text) is not None
