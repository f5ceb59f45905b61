"""``deepledger replay RUN_DIR [KEY=VALUE ...] [--price MODEL]``: choose a policy cheaply.

Reads the run's recorded configuration (``manifest.json``) and journals, replays them
under the recorded policy (checked against what the provider counted) and under the
policies to compare (``context/replay.py``), prints one line per policy — calls, billed
input tokens, the share a prompt cache could serve, estimated cost with and without
caching, attempts the window guard would have ended, compactions — and writes every
figure, per call, to ``RUN_DIR/replay.json``.

With no ``KEY=VALUE``, the comparison is the standard set: keep everything, keep the
last 5 tool results (one cut a turn, and in batches of the default
``agent.context.cut_batch``), a window of the last 5 rounds (likewise), and compaction
keeping 5 rounds;
with only ``llm.max_context_length=N``, the same set on a model with an N-token window
(where the window guard and compaction act). With ``agent.context.*`` or
``agent.keep_tool_result``, the recorded policy is compared with that one policy.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from deepledger.agent.answer import summary_prompt
from deepledger.config import ContextConfig, PriceConfig, closest_key, node_data
from deepledger.context.replay import (
    Policy,
    PolicyReplay,
    attempts,
    counting_error,
    replay,
)
from deepledger.context.strategies import make_strategy
from deepledger.errors import ConfigError
from deepledger.llm.factory import token_counter_for
from deepledger.llm.tokens import RememberingCounter, TokenCounter
from deepledger.llm.usage import Price, find_price, priced_by
from deepledger.messages import JSONObject
from deepledger.prices import library_version
from deepledger.store.files import write_text_atomic
from deepledger.store.layout import MANIFEST, REPLAY, RunLayout

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# What a replay may change; everything else is what the run was.
REPLAY_KEYS = (
    *(f"agent.context.{f.name}" for f in dataclasses.fields(ContextConfig)),
    "agent.keep_tool_result",
    "llm.max_context_length",
)
STANDARD_KEEP = 5
WINDOW_KEY = "llm.max_context_length"
D = TypeVar("D", bound="DataclassInstance")


@dataclass(frozen=True)
class RecordedModel:
    """The run's model, as far as a replay needs it: its window, its reply budget, and
    what its tokens are counted with."""

    model_name: str
    max_context_length: int
    max_tokens: int
    provider: str = ""
    base_url: str | None = None  # with provider: who prices the model (deepledger.prices)
    chat_format: str | None = None  # llm=local: a template named instead of the model's
    model_path: str | None = None  # llm=local: its GGUF file (None: the bundled one)


@dataclass(frozen=True)
class RecordedRun:
    """What a replay reads of a run's recorded configuration. A view, not the whole
    :class:`~deepledger.config.Config`: a run recorded by another release, with keys this
    one does not have, still replays."""

    llm: RecordedModel
    context: ContextConfig
    keep_tool_result: int
    answer_format: str = ""
    pricing: dict[str, PriceConfig] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_config(cls, config: JSONObject) -> RecordedRun:
        """The view of a configuration as the run directory records it; raises
        ``KeyError``, ``TypeError`` or ``ValueError`` when it does not hold one."""
        llm, agent = config["llm"], config["agent"]
        context = _known(ContextConfig, agent["context"])
        if "cut_batch" not in agent["context"]:  # recorded before batches: one cut a turn
            context = dataclasses.replace(context, cut_batch=1)
        return cls(
            llm=_known(RecordedModel, llm),
            context=context,
            keep_tool_result=int(agent["keep_tool_result"]),
            answer_format=(config.get("benchmark") or {}).get("answer_format") or "",
            pricing={
                str(model): _known(PriceConfig, entry)
                for model, entry in (config.get("pricing") or {}).items()
            },
        )


def _known(kind: type[D], values: Mapping[str, Any]) -> D:
    """A ``kind`` dataclass of the recorded ``values`` it has fields for."""
    known = {f.name for f in dataclasses.fields(kind)}
    return kind(**{k: v for k, v in values.items() if k in known})


def run_replay(run_dir: Path, overrides: list[str], price_model: str | None = None) -> str:
    """Replay ``run_dir``; the table to print. Writes ``run_dir/replay.json``."""
    cfg = recorded_config(run_dir)
    recorded = policy_of("recorded", cfg)
    if overrides and not all(o.startswith(WINDOW_KEY + "=") for o in overrides):
        candidate, window = apply_overrides(cfg, overrides)
        policies = [recorded, candidate]
    else:  # the standard set, at the run's window or the one given
        _, window = apply_overrides(cfg, overrides)
        policies = [recorded, *standard_policies(cfg)]
    journals = list(attempts(run_dir))
    counter = counter_for(cfg.llm)
    try:
        results = [
            replay(
                journals,
                policy,
                counter=counter,
                max_context_length=cfg.llm.max_context_length if i == 0 else window,
                max_tokens=cfg.llm.max_tokens,
                summary_prompt=summary_prompt(cfg.answer_format),
                recorded_policy=i == 0,
            )
            for i, policy in enumerate(policies)
        ]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"A journal in {run_dir} could not be replayed ({type(exc).__name__}: "
            f"{exc}): it was written by another version, or edited."
        ) from exc
    if price_model:  # another model's price: at whichever provider serves it
        model, price = price_model, find_price(price_model, cfg.pricing)
    else:
        model = cfg.llm.model_name
        price = find_price(model, cfg.pricing, cfg.llm.provider, cfg.llm.base_url)
    if price_model and price is None:
        raise ConfigError(
            f"--price {price_model}: no price for it in the run's pricing table nor in "
            f"{library_version()}."
        )
    error = counting_error(results[0])
    write_json(RunLayout(run_dir).replay, results, error, price, model, counter)
    return format_table(results, error, price, model, len(journals), counter)


# What reading a recorded configuration raises when its file is not one this version reads.
UNREADABLE_CONFIG = (json.JSONDecodeError, KeyError, TypeError, ValueError, OmegaConfBaseException)


def recorded_config_source(run_dir: Path) -> Path | None:
    """Where the run's configuration is recorded: a bench run's ``manifest.json``, else
    the ``.hydra/config.yaml`` Hydra wrote into a ``deepledger run`` folder (None:
    neither)."""
    layout = RunLayout(run_dir)
    for source in (layout.manifest, layout.hydra_config):  # `deepledger run`: no manifest
        if source.is_file():
            return source
    return None


def read_recorded_config(source: Path) -> JSONObject:
    """The configuration recorded in ``source`` (:func:`recorded_config_source`), as
    composed and resolved; raises one of :data:`UNREADABLE_CONFIG`."""
    if source.name == MANIFEST:
        config: JSONObject = json.loads(source.read_text(encoding="utf-8"))["config"]
        return config
    return node_data(OmegaConf.load(source), resolve=True)


def recorded_config(run_dir: Path) -> RecordedRun:
    """The run's configuration (:func:`recorded_config_source`)."""
    source = recorded_config_source(run_dir)
    if source is None:
        composed = RunLayout(run_dir).hydra_config.relative_to(run_dir)
        raise ConfigError(
            f"{run_dir} is not a run directory: it has neither {MANIFEST} (deepledger "
            f"bench) nor {composed} (deepledger run)."
        )
    try:
        return RecordedRun.from_config(read_recorded_config(source))
    except UNREADABLE_CONFIG as exc:
        raise ConfigError(
            f"{source} does not hold a run configuration this version can read ({exc})."
        ) from None


def policy_of(name: str, cfg: RecordedRun) -> Policy:
    return Policy(name, cfg.context, cfg.keep_tool_result)


def standard_policies(cfg: RecordedRun) -> list[Policy]:
    k, batch = STANDARD_KEEP, ContextConfig().batch
    batched = (
        []
        if batch == 1
        else [
            Policy(
                f"keep {k} tool results, cut {batch} at a time",
                ContextConfig("keep_tool_results", cut_batch=batch),
                k,
            ),
            Policy(
                f"round window {k}, cut {batch} at a time",
                ContextConfig("round_window", k, cut_batch=batch),
                -1,
            ),
        ]
    )
    return [
        Policy("keep everything", ContextConfig("keep_tool_results", cut_batch=1), -1),
        Policy(f"keep {k} tool results", ContextConfig("keep_tool_results", cut_batch=1), k),
        Policy(f"round window {k}", ContextConfig("round_window", k, cut_batch=1), -1),
        *batched,
        Policy(f"compaction, keep {k} rounds", ContextConfig("compaction", k), -1),
    ]


def apply_overrides(cfg: RecordedRun, overrides: list[str]) -> tuple[Policy, int]:
    context = cfg.context
    keep = cfg.keep_tool_result
    window = cfg.llm.max_context_length
    for override in overrides:
        key, sep, raw = override.partition("=")
        if not sep or key not in REPLAY_KEYS:
            close = closest_key(key, set(REPLAY_KEYS))
            hint = f" (did you mean {close}?)" if close else ""
            raise ConfigError(
                f"replay cannot change {override!r}{hint}: it takes KEY=VALUE for "
                + ", ".join(REPLAY_KEYS)
                + "."
            )
        value = _parse(key, raw)
        if key == "agent.keep_tool_result":
            keep = value
        elif key == "llm.max_context_length":
            window = value
        else:
            context = dataclasses.replace(context, **{key.rsplit(".", 1)[1]: value})
    _check(context, keep, window)
    name = describe(context, keep) + (
        "" if window == cfg.llm.max_context_length else f", {window:,} window"
    )
    return Policy(name, context, keep), window


def describe(context: ContextConfig, keep: int) -> str:
    """A policy's name for the table: what it keeps, in a few words (its strategy's)."""
    return make_strategy(context).describe(keep)


def _parse(key: str, raw: str) -> Any:
    kind = {f.name: f.type for f in dataclasses.fields(ContextConfig)}.get(key.rsplit(".", 1)[1])
    wanted = "int" if key in ("agent.keep_tool_result", "llm.max_context_length") else kind
    if wanted == "int | None" and raw.lower() in ("null", "none"):
        return None
    try:
        if wanted in ("int", "int | None"):
            return int(raw)
        if wanted == "float":
            return float(raw)
    except ValueError:
        raise ConfigError(f"{key}={raw!r}: not a number.") from None
    return raw


def _check(context: ContextConfig, keep: int, window: int) -> None:
    make_strategy(context)  # names a bad strategy or parameter
    if context.batch < 1:
        raise ConfigError(f"agent.context.cut_batch={context.cut_batch} must be at least 1.")
    if keep < -1:
        raise ConfigError(
            f"agent.keep_tool_result={keep}: use -1 (keep all), 0 (none) or N > 0 (the last N)."
        )
    if window <= 0:
        raise ConfigError(f"llm.max_context_length={window} must be positive.")


def counter_for(llm: RecordedModel) -> TokenCounter:
    """What the run's model counts with (its own tokenizer where its client counts
    exactly), remembering its counts: every policy replayed counts the same messages."""
    return RememberingCounter(token_counter_for(llm))


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.4f}"


def format_table(
    results: list[PolicyReplay],
    error: dict[str, float] | None,
    price: Price | None,
    model: str,
    attempts_count: int,
    counter: TokenCounter,
) -> str:
    lines = [
        f"Replayed {attempts_count} attempt journals; tokens counted with {counter.name}; "
        f"costs at {model} prices: " + ("" if price else "no costs, ") + priced_by(model, price),
        "",
        f"{'policy':<44} {'calls':>6} {'input tokens':>13} {'cacheable':>9} "
        f"{'cost':>10} {'cost cached':>12} {'guard':>6} {'compact':>7} {'cuts':>5}",
    ]
    for result in results:
        cached = result.cached_tokens / result.input_tokens if result.input_tokens else 0.0
        lines.append(
            f"{result.policy.name[:44]:<44} {len(result.calls):>6} {result.input_tokens:>13,} "
            f"{cached:>9.0%} {_money(result.cost(price, False)):>10} "
            f"{_money(result.cost(price, True)):>12} {len(result.guard_fired):>6} "
            f"{result.compactions:>7} {result.cuts:>5}"
        )
    if error:
        lines += [
            "",
            f"Recorded policy against the provider's counts ({error['calls_compared']} calls): "
            f"total {error['total_relative_error']:+.1%}, mean per call "
            f"{error['mean_relative_error']:.1%}, largest {error['max_relative_error']:.1%}.",
        ]
    lines += [
        "guard: attempts the window guard would have ended early (replay stops there); "
        "cacheable: input a prompt cache could serve (the prefix shared with the previous "
        "request).",
        f"Details per call: {REPLAY}.",
    ]
    return "\n".join(lines)


def write_json(
    path: Path,
    results: list[PolicyReplay],
    error: dict[str, float] | None,
    price: Price | None,
    model: str,
    counter: TokenCounter,
) -> None:
    payload = {
        "counter": counter.name,
        "priced_as": model,
        "priced_by": None if price is None else price.source,
        "recorded_policy_error": error,
        "policies": [
            {
                "name": r.policy.name,
                "context": dataclasses.asdict(r.policy.context),
                "keep_tool_result": r.policy.keep_tool_result,
                "input_tokens": r.input_tokens,
                "cacheable_tokens": r.cached_tokens,
                "output_tokens": r.output_tokens,
                "cost": r.cost(price, False),
                "cost_with_cache": r.cost(price, True),
                "prompt_tokens_per_turn": r.per_turn(),
                "guard_fired": [{"journal": j, "turn": t} for j, t in r.guard_fired],
                "compactions": r.compactions,
                "cuts": r.cuts,
                "calls": [dataclasses.asdict(c) for c in r.calls],
            }
            for r in results
        ],
    }
    write_text_atomic(path, json.dumps(payload, indent=1))  # indent 1: replay.json as it was
