"""Finding the ``\\boxed{...}`` answer in a model's text.

The last *complete* box wins, braces nested to any depth. Empty boxes and obvious
placeholders (``\\boxed{}``, ``\\boxed{answer}``, ``\\boxed{...}``) are skipped, so a
template echoed at the end of a reply does not hide the real answer before it.
"""

from __future__ import annotations

_MARKER = "\\boxed{"
PLACEHOLDERS = {"", "answer", "your answer", "final answer", "...", "…"}


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
