"""Training samples from a run's trajectories: ``chatml``, ``openai`` and ``dpo``.

Which attempts: each task's newest line in ``benchmark_results.jsonl``, each attempt's
last retry (the one that answered; earlier retries carry no answer), kept by the
request's filters (``only`` correct or all, turns, end reasons); a ``deepledger run``
folder's one journal has no verdict (kept with ``only=all``).

What a sample holds (``requests.py`` rebuilds it from the journal):

- per attempt: the whole conversation, untrimmed: system prompt, task, every kept
  reply and every tool result as it first came, the answer's closing prompt and reply;
- per turn (``per_turn``): each request as the context policy trimmed it (what the
  model really saw: blanked results, left-out rounds, compaction notes) plus that
  call's reply; the loop's calls and the answer's.

Messages are in the OpenAI wire form the run's requests were sent in
(``llm/openai.py``): ``chatml`` and ``openai`` differ in what the reasoning becomes
(``reasoning_content`` on the reply, which reasoning chat templates render as a
think block; a ``<think>`` block at the start of the content for OpenAI's format,
which has no field for it) and in OpenAI's ``parallel_tool_calls``. With the XML
protocol the tool schemas are in the system prompt, as the model read them; where the
requests carried them as ``tools`` (the native protocol, hermes with a template that
writes them), the samples carry the journaled specs in that wire form (a journal of an
older release has none: no ``tools``).

Identical samples are written once; every string passes through the redaction of
every export (``store/redaction.py``'s ``redact_exported``; journals keep tool
results as they came). ``dpo`` pairs a correct and an incorrect attempt at one task
(in the runs given): the prompt is the system prompt and the task (the same for both,
else the pair is left out), chosen and rejected the rest of each attempt.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from deepledger.errors import DeepLedgerError
from deepledger.export.request import ExportOutcome, ExportRequest
from deepledger.export.requests import (
    RunSettings,
    Trajectory,
    journal_of,
    rebuild,
    run_settings,
)
from deepledger.llm.openai import to_wire_messages, to_wire_tool
from deepledger.messages import JSONObject, Message, Role, sorted_json
from deepledger.store.files import write_text_atomic
from deepledger.store.layout import RunLayout
from deepledger.store.redaction import redact_exported
from deepledger.store.run_store import task_records

_THINK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


@dataclass(frozen=True)
class Attempt:
    """One attempt chosen for export, with its verdict (None: not judged)."""

    run_dir: Path
    task_id: str
    attempt: int
    correct: bool | None
    journal: Path
    settings: RunSettings


def chatml(request: ExportRequest) -> ExportOutcome:
    """``chatml``: one ``{"messages": [...], "tools": [...]}`` line a sample."""
    return _samples(request, openai=False)


def openai(request: ExportRequest) -> ExportOutcome:
    """``openai``: OpenAI's chat fine-tuning lines (``messages``, ``tools``,
    ``parallel_tool_calls``)."""
    return _samples(request, openai=True)


def _samples(request: ExportRequest, *, openai: bool) -> ExportOutcome:
    outcome = ExportOutcome()
    lines: list[str] = []
    seen: set[str] = set()
    for attempt in _attempts(request, outcome):
        trajectory = _trajectory(attempt, request, outcome)
        if trajectory is None:
            continue
        for messages in _sample_messages(trajectory, request):
            sample = _sample(messages, trajectory, request, openai=openai)
            _add(lines, seen, sample, outcome)
    return _write(request, lines, outcome)


def dpo(request: ExportRequest) -> ExportOutcome:
    """``dpo``: ``{"prompt", "chosen", "rejected"}`` lines, a correct and an incorrect
    attempt at the same task (every such combination), in conversational form."""
    outcome = ExportOutcome()
    everything = replace(request, only="all")
    by_task: dict[str, list[tuple[Attempt, Trajectory]]] = {}  # across the runs given
    for attempt in _attempts(everything, outcome):
        trajectory = _trajectory(attempt, everything, outcome)
        if trajectory is not None:
            by_task.setdefault(attempt.task_id, []).append((attempt, trajectory))
    lines: list[str] = []
    seen: set[str] = set()
    for attempts in by_task.values():
        good = [t for a, t in attempts if a.correct is True]
        bad = [t for a, t in attempts if a.correct is False]
        if not good or not bad:
            outcome.skip("task without both a correct and an incorrect attempt")
            continue
        for chosen in good:
            for rejected in bad:
                pair = _pair(chosen, rejected, request)
                if pair is None:
                    outcome.skip("pair whose prompts differ")
                else:
                    _add(lines, seen, pair, outcome)
    return _write(request, lines, outcome)


def _pair(chosen: Trajectory, rejected: Trajectory, request: ExportRequest) -> JSONObject | None:
    good = _wire(chosen.conversation, request, chosen)
    bad = _wire(rejected.conversation, request, rejected)
    cut_good, cut_bad = _first_reply(good), _first_reply(bad)
    if good[:cut_good] != bad[:cut_bad]:
        return None
    return {"prompt": good[:cut_good], "chosen": good[cut_good:], "rejected": bad[cut_bad:]}


def _first_reply(messages: list[JSONObject]) -> int:
    return next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))


# -- choosing attempts ------------------------------------------------------------------
def _attempts(request: ExportRequest, outcome: ExportOutcome) -> Iterator[Attempt]:
    for run_dir in request.run_dirs:
        settings = run_settings(run_dir)
        layout = RunLayout(run_dir)
        if not layout.results.is_file() and layout.run_journal.is_file():
            if request.only == "correct":  # a single question: nothing judged it
                outcome.skip("not judged (a deepledger run folder)")
            else:
                yield Attempt(run_dir, "run", 1, None, layout.run_journal, settings)
            continue
        for task_id, record in task_records(run_dir).items():
            for attempt in record.attempts:
                if request.only == "correct" and attempt.correct is not True:
                    reason = "not judged" if attempt.correct is None else "judged incorrect"
                    outcome.skip(reason)
                    continue
                last = attempt.retries[-1] if attempt.retries else None
                journal = journal_of(run_dir, last.journal if last else None)
                if journal is None:
                    outcome.skip("no journal for the attempt")
                    continue
                yield Attempt(run_dir, task_id, attempt.attempt, attempt.correct, journal, settings)


def _trajectory(
    attempt: Attempt, request: ExportRequest, outcome: ExportOutcome
) -> Trajectory | None:
    """The attempt rebuilt, or None (counted) when it is left out."""
    trajectory = rebuild(attempt.journal, attempt.settings)
    if trajectory.problem is not None:
        outcome.skip(f"not rebuildable: {trajectory.problem}")
        return None
    if (reason := request.left_out(trajectory.turns, trajectory.end_reason)) is not None:
        outcome.skip(reason)
        return None
    return trajectory


# -- samples ----------------------------------------------------------------------------
def _sample_messages(trajectory: Trajectory, request: ExportRequest) -> Iterator[list[JSONObject]]:
    if not request.per_turn:
        yield _wire(trajectory.conversation, request, trajectory)
        return
    for exchange in trajectory.exchanges:
        sent = _wire(list(exchange.request), request, trajectory, reasoning_on_replies=False)
        reply = _wire([exchange.reply], request, trajectory)
        yield sent + reply


def _wire(
    messages: list[Message],
    request: ExportRequest,
    trajectory: Trajectory,
    *,
    reasoning_on_replies: bool = True,
) -> list[JSONObject]:
    """``messages`` as the OpenAI wire carried them; the replies' reasoning added as
    ``reasoning_content`` (``reasoning_on_replies``: a sample's own replies, not those a
    request re-sent, which carry only what the run sent back)."""
    wire = to_wire_messages(messages, reasoning=trajectory.reasoning_sent)
    replies = [m for m in messages if m.role is Role.ASSISTANT]
    assistants = [w for w in wire if w["role"] == "assistant"]
    for message, out in zip(replies, assistants, strict=True):
        thought = message.reasoning or "\n\n".join(b.text for b in message.thinking if b.text)
        if reasoning_on_replies and thought and "reasoning_content" not in out:
            out["reasoning_content"] = thought
        if request.thinking == "drop":
            out.pop("reasoning_content", None)
            out["content"] = _THINK.sub("", out.get("content") or "", count=1)
    return wire


def _sample(
    messages: list[JSONObject], trajectory: Trajectory, request: ExportRequest, *, openai: bool
) -> JSONObject:
    """One line: ``messages`` and the tools the requests carried, as ``llm/openai.py``
    sent them (an XML run's schemas are in its system prompt: none; ``chatml`` then has
    ``[]``, ``openai`` no ``tools`` rather than an empty list).
    ``parallel_tool_calls`` says whether a reply made several native calls at once, for
    ``openai`` samples that have any."""
    tools = [to_wire_tool(spec) for spec in trajectory.tool_specs]
    if not openai:
        return {"messages": messages, "tools": tools}
    messages = [_inline_reasoning(m) for m in messages]
    sample: JSONObject = {"messages": messages}
    if tools:
        sample["tools"] = tools
    calls = [len(m["tool_calls"]) for m in messages if m.get("tool_calls")]
    if calls:
        sample["parallel_tool_calls"] = max(calls) > 1
    return sample


def _inline_reasoning(message: JSONObject) -> JSONObject:
    """OpenAI's format has no field for reasoning: a ``<think>`` block starts the content."""
    thought = message.get("reasoning_content")
    if message["role"] != "assistant" or thought is None:
        return message
    rest = {k: v for k, v in message.items() if k != "reasoning_content"}
    if thought:
        rest["content"] = f"<think>\n{thought}\n</think>\n\n{rest.get('content') or ''}"
    return rest


def _add(lines: list[str], seen: set[str], sample: JSONObject, outcome: ExportOutcome) -> None:
    """``sample`` redacted, unless an identical one was added already."""
    clean = redact_exported(sample)
    digest = hashlib.sha256(sorted_json(clean)).hexdigest()
    if digest in seen:
        outcome.skip("duplicate")
        return
    seen.add(digest)
    lines.append(json.dumps(clean, ensure_ascii=False))


def _write(request: ExportRequest, lines: list[str], outcome: ExportOutcome) -> ExportOutcome:
    """Write the lines to ``request.out``; nothing (and an error naming why) when none."""
    if not lines:
        why = ", ".join(f"{n} {reason}" for reason, n in outcome.skipped.items() if n)
        raise DeepLedgerError(
            f"deepledger export: {request.format}: nothing to write"
            + (f" ({why})" if why else " (no attempts in the runs given)")
            # dpo needs both verdicts whatever --only says
            + (": try --only all" if request.only == "correct" and request.format != "dpo" else "")
            + "."
        )
    request.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(request.out, "\n".join(lines) + "\n")
    outcome.written.append(request.out)
    outcome.rows = len(lines)
    return outcome
