"""Finding the ``\\boxed{...}`` answer in a model's text.

The last *complete* box wins, braces nested to any depth. Empty boxes and obvious
placeholders (``\\boxed{}``, ``\\boxed{answer}``, ``\\boxed{...}``) are skipped, so a
template echoed at the end of a reply does not hide the real answer before it.

A box that says there is no answer (:func:`is_non_answer`: ``unknown``, ``none``,
``N/A``, ``not found``, ``cannot determine``, ``?``... in any case, inside ``\\text{}``
and the like) is no answer either, as MiroThinker reads ``\\boxed{unknown}``: when the
last real box is one, :func:`answer_box` gives None (an earlier box is not taken: the
model's last word was that it does not know), and the closing asks again for a box.
The rule is on the whole box only: ``\\boxed{None of the above}`` or ``\\boxed{no
solution}`` are answers. The one price: a question whose true answer is the word
"none" (or "unknown") is answered that way only by the fallback of a final retry;
such questions are rare, and ``agent.recovery.boxed_non_answers=false`` takes every
box as written.
"""

from __future__ import annotations

import re

_MARKER = "\\boxed{"
PLACEHOLDERS = {"", "answer", "your answer", "final answer", "...", "…"}
# What a box holds when the model says it has no answer (compared after normalize()).
NON_ANSWERS = frozenset(
    {
        "unknown",
        "none",
        "n/a",
        "na",
        "not available",
        "not applicable",
        "not found",
        "no answer",
        "no answer found",
        "not known",
        "undetermined",
        "indeterminate",
        "cannot determine",
        "cannot be determined",
        "unable to determine",
        "cannot answer",
        "unable to answer",
        "cannot be answered",
        "insufficient information",
        "not enough information",
        "i don't know",
        "i do not know",
        "?",
        "??",
        "???",
        "？",
        "...",
        "…",
        "……",
    }
)
# LaTeX wrappers a box's words come in: \text{unknown}, \mathrm{N/A}, \textbf{...}.
_WRAPPER = re.compile(
    r"^\\(?:text|textbf|textit|textrm|mathrm|mathit|mathbf|operatorname)\s*\{(.*)\}$"
)


def all_boxed(text: str) -> list[str]:
    """Every complete box's content, in order."""
    found, start = [], text.find(_MARKER)
    while start != -1:
        content, end = _balanced(text, start + len(_MARKER))
        if content is not None:
            found.append(content.strip())
        start = text.find(_MARKER, end if content is not None else start + 1)
    return found


def last_boxed(text: str) -> str | None:
    """The last real boxed answer, or None."""
    for content in reversed(all_boxed(text)):
        if content.lower().strip(" .") not in PLACEHOLDERS:
            return content
    return None


def answer_box(text: str, *, non_answers: bool = True) -> str | None:
    """The box that answers: :func:`last_boxed`, unless it says there is no answer
    (``non_answers``: that rule is on)."""
    box = last_boxed(text)
    if box is not None and non_answers and is_non_answer(box):
        return None
    return box


def normalize(box: str) -> str:
    """A box's words as :data:`NON_ANSWERS` holds them: LaTeX wrappers, quotes, markdown
    emphasis and closing punctuation taken off, lower case, spaces collapsed."""
    text = box.strip()
    while True:
        match = _WRAPPER.match(text)
        if match is None:
            break
        text = match.group(1).strip()
    text = text.replace("\\,", " ").replace("\\ ", " ").replace("’", "'")
    text = text.strip("*_`\"'“”「」 ").rstrip(".。!")
    text = re.sub(r"\s+", " ", text).lower()
    return text.replace("can not", "cannot").replace("can't", "cannot")


def is_non_answer(box: str) -> bool:
    """Whether a box's whole content says there is no answer."""
    return normalize(box) in NON_ANSWERS


def _balanced(text: str, index: int) -> tuple[str | None, int]:
    depth = 1
    for i in range(index, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[index:i], i + 1
    return None, len(text)
