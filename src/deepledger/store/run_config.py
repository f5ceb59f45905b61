"""Which settings of a run count, and how a resume with other settings is told apart.

A resume whose settings differ from the last run's (``resume_changes``) is refused
unless ``resume.allow_config_change=true``; harmless keys (``RESUME_HARMLESS``:
concurrency, reporting, run budgets, timeouts, where the server is) never count. Each
run's settings have a ``config_id`` (a hash of the keys that count), stamped on every
result and progress line, so a summary over several says so (``config_breakdown``). A
change of judge is refused even when allowed: one accuracy never mixes two judges.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TypeAlias

from deepledger.messages import JSONObject
from deepledger.records.manifest import Manifest
from deepledger.records.results import ConfigBreakdown, ConfigUse, TaskRecord
from deepledger.store.files import latest_records, read_jsonl
from deepledger.store.layout import RunLayout
from deepledger.store.redaction import redact

# Settings a resume may change freely: how fast the run goes, how often it reports, how
# much it may spend (raising a budget and resuming is how budgets work), which tasks it
# covers, timeouts and retries, where the server is and which variable holds its key.
# Every other key counts: it changes what a task does or how it is judged.
RESUME_HARMLESS = (
    "benchmark.execution.max_concurrent",
    "benchmark.execution.report_every_seconds",
    "benchmark.execution.report",
    "benchmark.execution.max_tasks",
    "benchmark.execution.max_cost_usd",
    "benchmark.execution.max_tokens",
    "benchmark.execution.backend",  # where tasks run, not what they do: resume on either
    "benchmark.execution.ray",
    "benchmark.execution.resume",  # how an unfinished retry goes on, not what it does
    # How the task file is read and which of its tasks run: what each task asks is in its
    # input digest (bench/inputs.py), which a resume checks task by task.
    "benchmark.data.format",
    "benchmark.data.text_only",
    # Which published numbers the summary computes from the results. avg_at_k also runs
    # every attempt of the tasks still to run; tasks that stopped early make it null, with
    # the reason, rather than a mean over missing attempts.
    "benchmark.metrics",
    "benchmark.breakdown",
    "llm.base_url",
    "llm.endpoints",  # where the servers are, like llm.base_url
    "llm.endpoint_max_concurrent",
    "llm.api_key",
    "llm.api_key_env",
    "llm.api_key_required",
    "llm.timeout_seconds",
    "llm.connect_timeout_seconds",
    "llm.retry",
    "llm.async_client",
    "llm.threads",  # how the bundled model's server uses the cores: its speed, not its replies
    "llm.batch_threads",
    "llm.omp_wait_policy",
    "pricing",
    "sandbox",  # resource bounds of the python sandboxes, like timeouts: raise and resume
    # Which local files the model may never open, and whether the working directory is a
    # root: safety settings. Tightening them must not cost a new run directory, and a run
    # from before they existed must resume under them.
    "web.secret_files",
    "web.allow_working_dir",
    # Which pages count as answer leaks: tightening the guard must not cost a new run
    # directory either, nor refuse a run from before a preset gained patterns.
    "web.blocked_urls",
    "web.block_answer_sites",
    "benchmark.blocked_urls",
    # What a preset states of its judge's protocol (checked against the rule, never read
    # to decide a verdict), and how often an unreadable reply is asked again (no reply
    # is read differently: more asks only turn unjudged answers into verdicts).
    "benchmark.judge.labels",
    "benchmark.judge.fields",
    "benchmark.judge.max_asks",
    "resume",
    "hydra",
    "question",
    "task_file",
)
# Two judges' verdicts never share one accuracy (see RunStore.check_resume).
JUDGE_KEYS = ("benchmark.judge",)

# The configs compared here are JSON: as the manifest records them (``config.as_record``,
# redacted), written by this release or an older one with other keys. Flattened, each
# dotted key maps to its leaf value (an empty section to ``{}``).
FlatConfig: TypeAlias = dict[str, object]


def _flatten(value: object, prefix: str = "") -> FlatConfig:
    if isinstance(value, dict):
        flat: FlatConfig = {}
        for key, item in value.items():
            flat |= _flatten(item, f"{prefix}{key}.")
        return flat or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): value}


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def _counted(config: JSONObject) -> FlatConfig:
    """The flattened settings that count for a resume (None for an absent key: a key a
    newer deepledger added with no value is no change)."""
    return {
        k: v
        for k, v in _flatten(config).items()
        if not _under(k, RESUME_HARMLESS) and v is not None
    }


def config_id(config: JSONObject) -> str:
    """A short name for the settings that decide what a task does and how it is judged:
    a resume that changes only harmless keys keeps it."""
    canonical = json.dumps(_counted(redact(config)), sort_keys=True, default=str)
    return hashlib.sha1(canonical.encode()).hexdigest()[:8]


def resume_changes(before: JSONObject, after: JSONObject) -> tuple[list[str], list[str]]:
    """The differences that count (``key: old -> new``), and of those the judge's."""
    old, new = _counted(before), _counted(after)
    counted = [
        f"{key}: {old.get(key, '(absent)')!r} -> {new.get(key, '(absent)')!r}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    ]
    return counted, [c for c in counted if _under(c.split(":", 1)[0], JUDGE_KEYS)]


def config_breakdown(root: Path) -> ConfigBreakdown | None:
    """How many tasks finished under each config_id, when the results hold more than
    one (None otherwise), with the runs that used it and the tasks whose retries ran
    under several."""
    layout = RunLayout(root)
    try:
        runs = Manifest.load(json.loads(layout.manifest.read_text(encoding="utf-8"))).runs
    except (OSError, ValueError):  # pydantic's ValidationError and JSON's errors included
        runs = []
    lines = latest_records(read_jsonl(layout.results)).values()
    records = [TaskRecord.load(line) for line in lines]
    ids = [r.config_id for r in records if r.config_id]
    if len(set(ids)) < 2:
        return None
    mixed = [
        r.task_id
        for r in records
        if len({x.config_id for a in r.attempts for x in a.retries} - {None}) > 1
    ]
    return ConfigBreakdown(
        ids={
            cid: ConfigUse(
                tasks=ids.count(cid),
                runs=[n for n, run in enumerate(runs, 1) if run.config_id == cid],
            )
            for cid in dict.fromkeys(ids)
        },
        mixed_tasks=mixed,
    )


def config_differences(before: JSONObject, after: JSONObject) -> list[str]:
    old, new = _flatten(before), _flatten(after)
    return [
        f"{key}: {old.get(key, '(absent)')!r} -> {new.get(key, '(absent)')!r}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key, "(absent)") != new.get(key, "(absent)")
    ]
