"""Refused: the typed "not done, and why" a step gives back instead of a bare string.

A step that may decline (resume a killed run's retry, rebuild a journal) returns its
value or a :class:`Refused`; ``isinstance(x, Refused)`` reads as what it means, where a
``str`` in a union could be a value as well as a reason.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refused:
    """Why a step was not done (one line, for logs and journals)."""

    reason: str
