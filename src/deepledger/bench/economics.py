"""The token economics of a run: how its bill grew with the turns, and what its policy saved.

Re-sending the whole history every turn makes a task's billed input grow with the
square of its turns: with ``s`` tokens in the first request and ``t`` added per turn,
``n`` turns bill ``n*s + t*n*(n-1)/2`` (the seed's ``t*n(n+1)/2`` when ``s = t``).
This module puts the run's own numbers beside that arithmetic, from its journals:

- ``input_tokens_per_turn``: the prompt of the loop's call at each turn, as the provider
  counted it, averaged over attempts;
- ``first_turn_tokens`` (``s``) and ``added_per_turn`` (``t``) fitted to the curve a
  keep-everything policy would have had (a replay), and what the formula predicts for
  the run's mean number of turns against what that replay bills;
- ``cache_read_share``: the part of the input the provider served from its cache, and
  ``cacheable_share``: the part a cache could serve (the prefix each request shares
  with the one before it);
- the saving of the run's policy against keep-everything.
"""

from __future__ import annotations

from pathlib import Path

from deepledger.agent.answer import summary_prompt
from deepledger.bench.replay import RecordedRun, counter_for, policy_of, recorded_config
from deepledger.config import ContextConfig
from deepledger.context.replay import Policy, PolicyReplay, RecordedAttempt, attempts, replay
from deepledger.errors import ConfigError
from deepledger.records.economics import EconomicsUnavailable, TokenEconomics
from deepledger.records.events import ClosingCall, LLMCall

# A journal whose lines do not fit the records (``ValueError`` includes pydantic's).
UNREADABLE = (KeyError, TypeError, ValueError, AttributeError)


def token_economics(run_dir: Path) -> TokenEconomics | EconomicsUnavailable:
    """The figures above, or why there are none."""
    try:
        cfg = recorded_config(run_dir)
        journals = list(attempts(run_dir))  # decoded here: a line that does not fit raises
    except ConfigError as exc:
        return EconomicsUnavailable(unavailable=str(exc))
    except UNREADABLE as exc:
        return _unreadable(exc)
    try:
        return _economics(cfg, journals)
    except UNREADABLE as exc:
        return _unreadable(exc)


def _unreadable(exc: Exception) -> EconomicsUnavailable:
    return EconomicsUnavailable(
        unavailable=f"a journal could not be replayed: {type(exc).__name__}: {exc}"
    )


def _economics(cfg: RecordedRun, journals: list[RecordedAttempt]) -> TokenEconomics:
    counter = counter_for(cfg.llm)

    def replayed(policy: Policy) -> PolicyReplay:
        return replay(
            journals,
            policy,
            counter=counter,
            max_context_length=cfg.llm.max_context_length,
            max_tokens=cfg.llm.max_tokens,
            summary_prompt=summary_prompt(cfg.answer_format),
            recorded_policy=True,
        )

    recorded = replayed(policy_of("recorded", cfg))
    everything = replayed(Policy("keep everything", ContextConfig(), -1))
    billed = sum(c.recorded_input_tokens or 0 for c in recorded.calls)
    cache_read = sum(
        e.usage.cache_read_tokens
        for attempt in journals
        for e in attempt.events
        if isinstance(e, LLMCall | ClosingCall)
    )
    first, added, turns, predicted, actual = _growth(everything, len(journals))
    kept_everything = everything.input_tokens
    return TokenEconomics(
        input_tokens_per_turn=recorded.per_turn(recorded=True),
        first_turn_tokens=first,
        added_per_turn=added,
        mean_turns=turns,
        keep_everything_predicted_per_attempt=predicted,
        keep_everything_replayed_per_attempt=actual,
        billed_input_tokens=billed,
        cache_read_share=cache_read / billed if billed else None,
        cacheable_share=recorded.cached_tokens / recorded.input_tokens
        if recorded.input_tokens
        else None,
        keep_everything_input_tokens=kept_everything,
        policy_input_tokens=recorded.input_tokens,
        saving_vs_keep_everything=1 - recorded.input_tokens / kept_everything
        if kept_everything
        else None,
        counted_with=counter.name,
    )


def _growth(everything: PolicyReplay, attempts_count: int) -> tuple[float, float, float, int, int]:
    """(s, t, mean turns, n*s + t*n*(n-1)/2, replayed loop input per attempt)."""
    curve = everything.per_turn()
    if not curve or not attempts_count:
        return (0.0, 0.0, 0.0, 0, 0)
    first = curve[0]
    added = (curve[-1] - first) / (len(curve) - 1) if len(curve) > 1 else 0.0
    loop = [c for c in everything.calls if c.purpose == "loop"]
    turns = len({(c.journal, c.turn) for c in loop}) / attempts_count
    predicted = turns * first + added * turns * (turns - 1) / 2
    actual = sum(c.input_tokens for c in loop) / attempts_count
    return (round(first, 1), round(added, 1), round(turns, 2), round(predicted), round(actual))


def economics_line(economics: TokenEconomics | EconomicsUnavailable | None) -> str:
    """One line for the terminal summary of a summary's ``token_economics``; empty when
    it has no figures."""
    if not isinstance(economics, TokenEconomics):
        return ""
    parts = []
    curve = economics.input_tokens_per_turn
    if curve:
        turns = f"{len(curve)} turn" + ("" if len(curve) == 1 else "s")
        parts.append(f"prompt {curve[0]:,.0f} -> {curve[-1]:,.0f} tokens over {turns}")
    parts.append(f"+{economics.added_per_turn:,.0f}/turn")
    if economics.cache_read_share is not None:
        parts.append(f"cache read {economics.cache_read_share:.0%}")
    saving = economics.saving_vs_keep_everything
    if saving is not None:
        parts.append(f"saves {saving:.0%} vs keep-everything")
    return " · ".join(parts)
