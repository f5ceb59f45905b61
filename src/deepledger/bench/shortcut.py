"""When a judge model need not be asked: the two answers cannot differ in meaning.

A model judge is slow and costs money, so an answer that is plainly the ground truth is
decided without it. "Plainly" is narrow on purpose: any rewriting that makes two texts
equal can also make two different answers equal — `CO` (carbon monoxide) and `Co`
(cobalt), `5 MW` and `5 mW`, `10²` and `102`, `5!` and `5`, `[0, 1]` and `(0, 1)`,
`Who` and `The Who`. The official graders either have no shortcut (HLE) or compare the
texts exactly (MiroThinker's). So only two things count as the same answer here:

- the same text, once whitespace at either end and one trailing full stop are removed
  (case, accents, brackets, articles, units and superscripts all count);
- two plain numbers (digits, an optional sign and decimal point, nothing else) with the
  same value: `42` and `42.0`, `-3.50` and `-3.5`.

Everything else goes to the judge.
"""

from __future__ import annotations

import re
from decimal import Decimal

_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")


def _trimmed(text: str) -> str:
    text = text.strip()
    return text[:-1].rstrip() if text.endswith(".") and not _PLAIN_NUMBER.fullmatch(text) else text


def same_beyond_doubt(answer: str, ground_truth: str) -> str | None:
    """Why ``answer`` cannot mean anything but ``ground_truth``, or None to ask the judge."""
    got, want = _trimmed(answer), _trimmed(ground_truth)
    if not got or not want:
        return None
    if got == want:
        return "the same text as the ground truth"
    plain = _PLAIN_NUMBER.fullmatch(got) and _PLAIN_NUMBER.fullmatch(want)
    if plain and Decimal(got) == Decimal(want):
        return "the same number as the ground truth"
    return None
