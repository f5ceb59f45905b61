"""The token economics (bench/economics.py) of runs recorded by `deepledger bench`'s own
code path with the scripted model (tests/support/runs.py), not of made-up journals."""

from __future__ import annotations

import json
from pathlib import Path

from deepledger.bench.economics import economics_line, token_economics
from deepledger.records.economics import EconomicsUnavailable, TokenEconomics
from tests.support.runs import WINDOW


def journal_input_tokens(root: Path) -> int:
    """What the journals say the provider billed for the agent's own calls."""
    return sum(
        event["usage"]["input_tokens"]
        for journal in (root / "tasks").glob("*/attempt-*.jsonl")
        for event in map(json.loads, journal.read_text().splitlines())
        if event["event"] in ("llm_call", "closing_call")
    )


def test_a_compacting_run_is_replayed_to_its_bill_and_saves_against_keeping_everything(
    finished_run,
):
    economics = token_economics(finished_run)
    assert isinstance(economics, TokenEconomics)
    assert economics.policy_input_tokens == journal_input_tokens(finished_run)
    curve = economics.input_tokens_per_turn
    assert curve[:4] == sorted(curve[:4])  # a page of results a turn, nothing compacted yet
    assert max(curve) < WINDOW  # compaction kept every request inside the window
    assert economics.added_per_turn > 300
    assert 0 < economics.saving_vs_keep_everything < 1
    assert economics.policy_input_tokens < economics.keep_everything_input_tokens
    assert economics.cache_read_share == 0  # the scripted model reports no cache reads
    assert 0 < economics.cacheable_share < 1  # compaction breaks the shared prefix
    assert economics.counted_with == "tiktoken:o200k_base"  # gpt-4.1's, as recorded
    line = economics_line(economics)
    assert line.startswith(f"prompt {curve[0]:,.0f} -> ") and "saves" in line


def test_keeping_everything_saves_nothing_and_keeping_five_results_saves_some(runs_keeping):
    everything, keep5 = (token_economics(run) for run in runs_keeping)
    assert everything.saving_vs_keep_everything == 0
    assert everything.policy_input_tokens == everything.keep_everything_input_tokens
    assert 0 < keep5.saving_vs_keep_everything < 1
    # The same questions and results: both runs' keep-everything replays bill the same.
    assert keep5.keep_everything_input_tokens == everything.keep_everything_input_tokens


def test_a_killed_run_still_has_its_economics_and_a_folder_that_is_no_run_says_so(
    killed_run, tmp_path
):
    economics = token_economics(killed_run)
    assert isinstance(economics, TokenEconomics)
    assert economics.policy_input_tokens == journal_input_tokens(killed_run)
    assert token_economics(tmp_path / "nothing") == EconomicsUnavailable(
        unavailable=f"{tmp_path / 'nothing'} is not a run directory: it has neither "
        "manifest.json (deepledger bench) nor .hydra/config.yaml (deepledger run)."
    )
