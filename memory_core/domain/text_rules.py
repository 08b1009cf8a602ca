"""Rules for short free text that people and models read back: a name or label shown in a
terminal, on a page or in a model's context. One copy, so every such field refuses the same
characters for the same reason.
"""

from __future__ import annotations

import unicodedata

# The Unicode bidirectional controls (UAX #9: embeddings, overrides, isolates, marks): shown
# nowhere, they reorder what is shown around them, so "report\u202etxt.exe" reads "reportexe.txt".
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Control characters (NUL, ESC, newlines), lone surrogates, line and paragraph separators.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})


def label_problem(text: str) -> str | None:
    """Why ``text`` cannot be a label (None when it can): a control character (NUL, ESC, a line
    break), a bidirectional control or a lone surrogate would be stored, then garble or disguise
    what a terminal, a page or a model shows."""
    for index, ch in enumerate(text):
        if ch in BIDI_CONTROLS:
            return f"holds a bidirectional control (U+{ord(ch):04X}) at character {index}"
        if unicodedata.category(ch) in _REFUSED_CATEGORIES:
            return f"holds a control character (U+{ord(ch):04X}) at character {index}"
    return None
