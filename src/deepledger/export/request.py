"""What an export was asked for and what it wrote.

``ExportRequest`` is the command line read (``cli/export.py``), handed to one format's
entry function (``formats.py``); ``ExportOutcome`` is what the function reports back:
the files written and how many rows or samples, and what was left out and why, so the
command can say it in one line per reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Only = Literal["correct", "all"]
Thinking = Literal["keep", "drop"]
TableFormat = Literal["jsonl", "parquet"]


@dataclass(frozen=True)
class ExportRequest:
    """One ``deepledger export`` command: which runs, which format, where to, and the
    filters of the training formats (``chatml``, ``openai``, ``dpo``)."""

    run_dirs: tuple[Path, ...]
    format: str  # a key of formats.FORMATS
    out: Path  # a file (results, chatml, openai, dpo) or a folder (mirothinker)
    table: TableFormat = "jsonl"  # results: JSONL or Parquet
    # Attempts (tasks) judged correct, or every one; None: the format's default
    # (formats.ExportFormat.default_only: correct for chatml/openai, all for results).
    only: Only | None = None
    min_turns: int | None = None
    max_turns: int | None = None
    end_reasons: frozenset[str] | None = None  # keep attempts that ended so; None: any
    per_turn: bool = False  # one sample per turn (its trimmed request + reply)
    thinking: Thinking = "keep"  # the model's reasoning text kept in samples, or dropped
    per_attempt: bool = False  # results: one row per attempt of pass@k, not per task
    # Where ``out`` is renamed to once written (``deepledger export`` writes under a
    # temporary name); None: ``out`` is the output. A path written inside the output
    # (MiroThinker's log_file_path) names the final place, not the temporary one.
    final_out: Path | None = None

    def left_out(self, turns: int, end_reason: str | None) -> str | None:
        """Why an attempt (or a task) of ``turns`` turns that ended by ``end_reason`` is
        not exported under the turn and end-reason filters; None: it is."""
        if self.min_turns is not None and turns < self.min_turns:
            return f"fewer than {self.min_turns} turns (--min-turns)"
        if self.max_turns is not None and turns > self.max_turns:
            return f"more than {self.max_turns} turns (--max-turns)"
        if self.end_reasons is not None and end_reason not in self.end_reasons:
            return (
                f"ended by {end_reason}, not {' or '.join(sorted(self.end_reasons))} (--end-reason)"
            )
        return None

    def final(self, path: Path) -> Path:
        """``path``, written under ``out``, where it will be once the output is in place."""
        if self.final_out is None or not path.is_relative_to(self.out):
            return path
        return self.final_out / path.relative_to(self.out)


@dataclass
class ExportOutcome:
    """What one export wrote, and what it left out (reason -> how many)."""

    written: list[Path] = field(default_factory=list)
    rows: int = 0  # rows, samples or pairs written
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count
