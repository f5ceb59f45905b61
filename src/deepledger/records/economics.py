"""The ``token_economics`` section of ``summary.json``: the run's journals replayed
(``bench/economics.py`` computes it and says what each figure means)."""

from __future__ import annotations

from pydantic import Field

from deepledger.records.base import Record


class TokenEconomics(Record):
    """How the run's bill grew with the turns, and what its policy saved. The fields are
    in the order they are written (the report page shows them in it). Each has a
    default: a summary an older release wrote may lack one."""

    input_tokens_per_turn: list[float] = Field(default_factory=list)
    first_turn_tokens: float = 0.0
    added_per_turn: float = 0.0
    mean_turns: float = 0.0
    keep_everything_predicted_per_attempt: int = 0
    keep_everything_replayed_per_attempt: int = 0
    billed_input_tokens: int = 0
    cache_read_share: float | None = None
    cacheable_share: float | None = None
    keep_everything_input_tokens: int = 0
    policy_input_tokens: int = 0
    saving_vs_keep_everything: float | None = None
    counted_with: str = ""


class EconomicsUnavailable(Record):
    """The section when the journals could not be replayed, or not yet."""

    unavailable: str  # why
