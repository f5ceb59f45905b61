"""Read a run directory into the report's data.

Works on a finished run, on one still going and on one that was killed: tasks with a
line in ``benchmark_results.jsonl`` are shown as judged; tasks with journals but no line
yet are ``unfinished`` (running, or stopped before their end); tasks the suite expected
that have not started are counted. A journal this version cannot read is listed under
``missing`` instead of stopping the report. A ``deepledger run`` folder is read as a
run of one task, its question: never judged (a question has no ground truth), shown
as it is while it is being answered.

Long texts are clipped so that a report of 1,000 long tasks stays small enough to open:
the journal path is in the report, and the journal keeps every character.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from deepledger import __version__
from deepledger.config import BUDGET_KEYS
from deepledger.messages import JSONObject
from deepledger.records.codec import encode, read_journal_file
from deepledger.records.events import (
    ClosingCall,
    Compacted,
    CompactionFailed,
    Event,
    LLMCall,
    Looping,
    ReplyCut,
    RetryStarted,
    TaskFinished,
    TaskStarted,
    WindowExhausted,
)
from deepledger.records.results import AttemptRecord, SummaryRecord, TaskRecord
from deepledger.report.view import CallPoint, JournalView, MarkPoint, RunFacts, TaskRow
from deepledger.store.layout import RunLayout, attempt_journals, safe_name, subagent_journals
from deepledger.store.locate import run_kind
from deepledger.store.lock import run_is_live
from deepledger.store.run_store import load_manifest, task_records

TEXT_LIMIT = 6_000  # characters of a reply, task text, post-mortem or notes kept inline
RESULT_LIMIT = 2_500  # characters of one tool result kept inline
FIELD_LIMIT = 1_500  # characters of any other string (arguments, rollback details...)
QUESTION_LIMIT = 400  # characters of the question in the task table
_OUTCOMES = {True: "correct", False: "wrong", None: "unjudged"}
NO_VERDICT = "no-verdict"  # a task whose judge gave no verdict (judgement.unjudged)
# Recorded for the replay, not for reading: large and the same in every journal.
_DROPPED_FIELDS = {"system_prompt", "prompts"}
_SMALLEST_LIMIT = min(TEXT_LIMIT, RESULT_LIMIT, FIELD_LIMIT)


@dataclass
class RunData:
    """Everything the page shows; ``trajectories[i]`` belongs to ``tasks[i]``."""

    run: RunFacts
    tasks: list[TaskRow] = field(default_factory=list)
    trajectories: list[list[JournalView]] = field(default_factory=list)
    # Every model call, in time order: the loop's ("loop"), the closing calls (their
    # purpose), replies cut at their budget and asked again ("reply_cut"), sub-agents'
    # ("subagent") and those of retries a killed run left ("interrupted"), which the
    # task's usage counts too.
    calls: list[CallPoint] = field(default_factory=list)
    marks: list[MarkPoint] = field(default_factory=list)  # guard, compaction, looping


def collect(root: Path, summary: SummaryRecord) -> RunData:
    """The report's data for ``root``, a ``deepledger bench`` run directory or a
    ``deepledger run`` folder (read as a run of one task); ``summary`` is the run's
    metrics (``bench.report.current_summary``)."""
    if run_kind(root) == "run":
        return _collect_run_folder(root, summary)
    manifest, config = load_manifest(root)
    records = task_records(root)
    data = RunData(run=_run_facts(root, manifest, config, summary))
    missing: list[str] = data.run["missing"]
    task_dirs = RunLayout(root).task_dirs()
    ids = list(records)
    recorded = {safe_name(task_id) for task_id in records}
    for name, task_dir in task_dirs.items():  # tasks with journals and no result line yet
        task_id = None if name in recorded else _task_id_of(task_dir)
        if task_id is not None and task_id not in records:
            ids.append(task_id)
    live = data.run["state"] == "running"
    for index, task_id in enumerate(ids):
        found = task_dirs.get(safe_name(task_id))
        trajectory: list[JournalView] = []
        calls: list[CallPoint] = []
        marks: list[MarkPoint] = []
        if found is not None:
            try:
                trajectory, calls, marks = _trajectory(root, found, index)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                missing.append(f"{found.name}: a journal this version cannot read ({exc!r})")
                trajectory, calls, marks = [], [], []
        elif task_id in records:
            missing.append(f"{task_id}: no journals in tasks/ (moved or deleted)")
        folder = found.relative_to(root).as_posix() if found else None
        data.tasks.append(_row(task_id, records.get(task_id), trajectory, live, folder))
        data.trajectories.append(trajectory)
        data.calls += calls
        data.marks += marks
    data.calls.sort(key=lambda c: str(c.get("ts") or ""))
    expected = manifest.get("tasks_expected")
    data.run["tasks_shown"] = len(data.tasks)
    data.run["tasks_not_started"] = max(0, expected - len(data.tasks)) if expected else 0
    return data


# -- the run --------------------------------------------------------------------------
def _run_facts(
    root: Path, manifest: JSONObject, config: JSONObject, summary: SummaryRecord
) -> RunFacts:
    runs = manifest.get("runs") or []
    started = runs[0].get("started_at") if runs else manifest.get("created_at")
    finished = runs[-1].get("finished_at") if runs else None
    live = not finished and run_is_live(root)
    return {
        "dir": str(root),
        "kind": "bench",
        "benchmark": config["benchmark"]["name"],
        "generated_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "deepledger_version": __version__,
        "recorded_version": (runs[-1].get("versions") or {}).get("deepledger") if runs else None,
        # finished; running (a process holds the directory); or stopped: killed or
        # crashed before its end (the same bench command resumes it)
        "state": "finished" if finished else "running" if live else "stopped",
        "started_at": started,
        "finished_at": finished,
        "sessions": len(runs),  # a resumed run has several
        "wall_seconds": wall_seconds(runs, live=live, activity=lambda: last_writes(root)),
        "config": config_highlights(config, _hydra_choices(root)),
        "overrides": _hydra_overrides(root),
        "summary": summary.to_json(),
        "missing": [],
        "tasks_shown": 0,  # counted once the tasks are read
        "tasks_not_started": 0,
    }


def config_highlights(config: JSONObject, choices: dict[str, str | None]) -> JSONObject:
    """The settings a reader of a run asks about first (``choices``: the config groups
    the run was started with, ``agent=keep5_compress5`` and so on)."""
    llm, agent = config.get("llm") or {}, config.get("agent") or {}
    context = agent.get("context") or {}
    execution = (config.get("benchmark") or {}).get("execution") or {}
    main = agent.get("main_agent") or {}
    return {
        "llm": f"{llm.get('provider', '?')}: {llm.get('model_name', '?')}",
        "llm preset": choices.get("llm"),
        "llm.max_context_length": llm.get("max_context_length"),
        "llm.max_tokens": llm.get("max_tokens"),
        "llm.temperature": llm.get("temperature"),
        "agent preset": choices.get("agent"),
        "agent.keep_tool_result": agent.get("keep_tool_result"),
        "agent.context_compress_limit": agent.get("context_compress_limit"),
        "agent.context.strategy": context.get("strategy"),
        "agent.context.keep_rounds": context.get("keep_rounds"),
        "agent.main_agent.max_turns": main.get("max_turns"),
        "agent.main_agent.tools": main.get("tools"),
        "tool protocol": llm.get("tool_protocol") or agent.get("tool_protocol"),
        "benchmark.execution.pass_at_k": execution.get("pass_at_k"),
        "benchmark.execution.max_concurrent": execution.get("max_concurrent"),
        # Budgets (null, not shown: none set).
        **{f"benchmark.execution.{key}": execution.get(key) for key in BUDGET_KEYS},
    }


def _hydra_choices(root: Path) -> dict[str, str | None]:
    try:
        choices = OmegaConf.to_container(
            OmegaConf.load(RunLayout(root).hydra_settings).hydra.runtime.choices
        )
    except Exception:  # not started through Hydra, or an older layout: presets unknown
        return {}
    if not isinstance(choices, dict):
        return {}
    return {str(group): None if name is None else str(name) for group, name in choices.items()}


def _hydra_overrides(root: Path) -> list[str]:
    try:
        return [str(o) for o in OmegaConf.load(RunLayout(root).hydra_overrides)]
    except Exception:
        return []


def wall_seconds(
    runs: list[JSONObject], *, live: bool, activity: Callable[[], list[datetime]]
) -> float | None:
    """Time spent running, summed over the sessions of a resumed run. A session that
    has no end on record was killed: it is counted up to the last file it wrote
    (``activity()``, asked only then), and the last session of a live run up to now."""
    try:
        starts = [_utc(run["started_at"]) for run in runs]
        ends = [_utc(r["finished_at"]) if r.get("finished_at") else None for r in runs]
    except (KeyError, TypeError, ValueError):
        return None
    if any(end is None for end in ends[: len(ends) - live]):
        writes = activity()
    total = 0.0
    for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
        if end is None and live and i == len(runs) - 1:
            end = datetime.now(start.tzinfo)
        elif end is None:
            later = starts[i + 1] if i + 1 < len(starts) else None
            end = max(
                (t for t in writes if t >= start and (later is None or t < later)),
                default=start,
            )
        total += max(0.0, (end - start).total_seconds())
    return round(total, 1) if runs else None


def _utc(stamp: str) -> datetime:
    """An ISO time; one written without a zone (by hand, say) is taken as UTC."""
    moment = datetime.fromisoformat(stamp)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def last_writes(root: Path) -> list[datetime]:
    """When each results, progress and journal file of the run was last written."""
    return _mtimes(RunLayout(root).jsonl_files())


# -- a `deepledger run` folder: one question ------------------------------------------
RUN_BENCHMARK = "deepledger run"  # what a run folder's report and summary call its suite
# A question asked with `deepledger run` has no ground truth: its answer is never graded.
NOT_JUDGED = "not judged: a question asked with `deepledger run` has no ground truth"


def _question_events(root: Path) -> tuple[TaskStarted | None, TaskFinished | None]:
    """The run folder's task_started and task_finished (None: not written yet)."""
    events = events_of(RunLayout(root).run_journal, (TaskStarted, TaskFinished))
    started = next((e for e in events if isinstance(e, TaskStarted)), None)
    finished = next((e for e in reversed(events) if isinstance(e, TaskFinished)), None)
    return started, finished


def run_folder_record(root: Path) -> TaskRecord | None:
    """The question of a ``deepledger run`` folder as a task's record once it ended
    (None before: running, or stopped), its id the folder's name. Never judged."""
    started, finished = _question_events(root)
    if finished is None:
        return None
    seconds = None
    if started is not None and started.ts and finished.ts:
        seconds = round((_utc(finished.ts) - _utc(started.ts)).total_seconds(), 1)
    answered = AttemptRecord(final_answer=finished.answer, provenance=finished.provenance)
    return TaskRecord(
        task_id=root.name,
        question=started.task if started is not None else "",
        final_answer=finished.answer,
        provenance=finished.provenance,
        end_reason=finished.end_reason.value,
        end_detail=finished.end_detail,
        attempts=[answered],
        usage=finished.usage,
        cost=finished.cost,
        turns=finished.turns,
        tool_calls=finished.tool_calls,
        elapsed_seconds=seconds,
    )


def _collect_run_folder(root: Path, summary: SummaryRecord) -> RunData:
    """A ``deepledger run`` folder as a run of one task: its question, answer and
    trajectory (sub-agents included), read while it runs too."""
    layout = RunLayout(root)
    record = run_folder_record(root)
    data = RunData(run=_run_folder_facts(root, summary))
    trajectory: list[JournalView] = []
    try:
        trajectory, data.calls, data.marks = _journal_views(
            root, layout.run_journal, 0, "the question", (1, 0)
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        data.run["missing"].append(
            f"{layout.run_journal.name}: a journal this version cannot read ({exc!r})"
        )
    live = data.run["state"] == "running"
    row = _row(root.name, record, trajectory, live, layout.run_journal.name)
    if record is not None:
        row["judgement"] = NOT_JUDGED
    elif not live:  # a `deepledger run` is not resumed: the question is asked again
        row["judgement"] = "stopped before it finished"
    data.tasks.append(row)
    data.trajectories.append(trajectory)
    data.calls.sort(key=lambda c: str(c.get("ts") or ""))
    data.run["tasks_shown"] = 1
    return data


def _run_folder_facts(root: Path, summary: SummaryRecord) -> RunFacts:
    layout = RunLayout(root)
    started, finished = _question_events(root)
    live = finished is None and run_is_live(root)
    session: JSONObject = {
        "started_at": started.ts if started else None,
        "finished_at": finished.ts if finished else None,
    }
    journals = [layout.run_journal, *(c.path for c in subagent_journals(layout.run_journal))]
    return {
        "dir": str(root),
        "kind": "run",
        "benchmark": RUN_BENCHMARK,
        "generated_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "deepledger_version": __version__,
        "recorded_version": None,  # a run folder has no manifest to say it
        "state": "finished" if finished else "running" if live else "stopped",
        "started_at": session["started_at"],
        "finished_at": session["finished_at"],
        "sessions": 1,
        "wall_seconds": wall_seconds(
            [session] if started else [], live=live, activity=lambda: _mtimes(journals)
        ),
        "config": config_highlights(_hydra_config(root), _hydra_choices(root)),
        "overrides": _hydra_overrides(root),
        "summary": summary.to_json(),
        "missing": [],
        "tasks_shown": 0,
        "tasks_not_started": 0,
    }


def _hydra_config(root: Path) -> JSONObject:
    """The settings a run folder was started with (``.hydra/config.yaml``, redacted)."""
    try:
        config = OmegaConf.to_container(OmegaConf.load(RunLayout(root).hydra_config))
    except Exception:  # not started through Hydra, or unreadable: settings unknown
        return {}
    return {str(k): v for k, v in config.items()} if isinstance(config, dict) else {}


def _mtimes(paths: list[Path]) -> list[datetime]:
    times = []
    for path in paths:
        try:
            times.append(datetime.fromtimestamp(path.stat().st_mtime, UTC))
        except OSError:
            continue
    return times


# -- tasks ----------------------------------------------------------------------------
def _task_id_of(task_dir: Path) -> str | None:
    for journal in _journals(task_dir):
        for event in events_of(journal[2], (RetryStarted,)):
            if isinstance(event, RetryStarted) and event.task_id:
                return event.task_id
    return None


# The events whose fields the report reads; the others go to the page as their lines.
_READ: tuple[type[Event], ...] = (
    RetryStarted,
    LLMCall,
    ClosingCall,
    WindowExhausted,
    Compacted,
    CompactionFailed,
    Looping,
)


def events_of(journal: Path, kinds: tuple[type[Event], ...] = _READ) -> list[Event]:
    """The journal's events of ``kinds``, typed; a line that holds no event is skipped,
    one whose fields do not fit raises ``ValueError`` (the task is listed as unreadable)."""
    return read_journal_file(journal, kinds).events


def _journals(task_dir: Path, *, interrupted: bool = False) -> list[tuple[int, int, Path]]:
    """The task's attempt journals in order. A killed run's ``.interrupted`` ones
    (``interrupted=True``) are not shown, the retry was run again, but their calls
    were paid for."""
    return attempt_journals(task_dir, interrupted=interrupted)


def _row(
    task_id: str,
    record: TaskRecord | None,
    trajectory: list[JournalView],
    live: bool,
    folder: str | None,
) -> TaskRow:
    if record is None:  # journals only: running now, or stopped before its end
        return _unfinished_row(task_id, trajectory, live, folder)
    usage, attempts, judgement = record.usage, record.attempts, record.judgement
    status = outcome(record.correct) if record.status == "finished" else record.status
    if record.correct is None and judgement is not None and judgement.unjudged:
        status = NO_VERDICT  # the judge was asked and gave no verdict: apart from no truth
    return {
        "id": task_id,
        "question": clip(record.question, QUESTION_LIMIT),
        "ground_truth": _text(record.ground_truth),
        "answer": _text(record.final_answer),
        "status": status,
        "judgement": clip((judgement and judgement.reason) or record.error or "", FIELD_LIMIT),
        "judge": judgement.judge if judgement else None,
        "attempts": len(attempts),
        # pass@1 counts the first attempt: with pass@k a task solved on a later one is
        # "correct" in status and wrong here.
        "first_attempt": _first_attempt(attempts),
        "post_mortems": max((a.carried_post_mortems for a in attempts), default=0),
        "turns": record.turns,
        "tool_calls": record.tool_calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "extraction_input_tokens": record.extraction_usage.input_tokens,
        "extraction_output_tokens": record.extraction_usage.output_tokens,
        "cost": record.cost,
        "end_reason": record.end_reason,
        "provenance": record.provenance,
        "seconds": record.elapsed_seconds,
        "dir": folder,
        "worker_lost": record.worker_lost,
    }


def outcome(correct: object) -> str:
    """A judged task's status from its ``correct`` (None: no ground truth to judge by)."""
    return _OUTCOMES[correct] if isinstance(correct, bool | None) else "unknown"


def _first_attempt(attempts: list[AttemptRecord]) -> str | None:
    correct = attempts[0].correct if attempts else None
    return outcome(correct) if isinstance(correct, bool) else None


def _unfinished_row(
    task_id: str, trajectory: list[JournalView], live: bool, folder: str | None
) -> TaskRow:
    """A task with journals and no result: its figures so far. Turns and tool calls are
    the main loop's (as in a finished task's record); tokens include its sub-agents'."""
    events = [e for journal in trajectory for e in journal["events"]]
    loop = [e for journal in trajectory if not journal["subagent"] for e in journal["events"]]
    usage = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0}
    for event in events:
        if event["event"] in ("llm_call", "closing_call"):
            for name in usage:
                usage[name] += (event.get("usage") or {}).get(name) or 0
    question = next((e.get("task") for e in loop if e["event"] == "task_started"), "")
    return {
        "id": task_id,
        "question": clip(question or "", QUESTION_LIMIT),
        "ground_truth": None,
        "answer": None,
        "status": "unfinished",
        "judgement": "running now" if live else "stopped before it finished (resume the run)",
        "judge": None,
        "attempts": max((j["attempt"] for j in trajectory), default=0),
        "first_attempt": None,
        "post_mortems": max((j.get("carried_post_mortems") or 0 for j in trajectory), default=0),
        "turns": sum(1 for e in loop if e["event"] == "assistant"),
        "tool_calls": sum(len(e.get("calls") or []) for e in loop if e["event"] == "tool_results"),
        "input_tokens": usage["input_tokens"],
        "output_tokens": usage["output_tokens"],
        "cache_read_tokens": usage["cache_read_tokens"],
        "cache_write_tokens": None,
        "cost": None,
        "end_reason": None,
        "provenance": None,
        "seconds": None,
        "dir": folder,
        "worker_lost": 0,
    }


# -- trajectories ---------------------------------------------------------------------
def _trajectory(
    root: Path, task_dir: Path, index: int
) -> tuple[list[JournalView], list[CallPoint], list[MarkPoint]]:
    """The task's journals (sub-agent runs after the run that called them, nested ones
    included), its model calls and its marks for the run's charts."""
    trajectory: list[JournalView] = []
    calls: list[CallPoint] = []
    marks: list[MarkPoint] = []
    for attempt, retry, path in _journals(task_dir):
        views, more_calls, more_marks = _journal_views(
            root, path, index, f"attempt {attempt} · retry {retry}", (attempt, retry)
        )
        trajectory += views
        calls += more_calls
        marks += more_marks
    for attempt, retry, path in _journals(task_dir, interrupted=True):
        label = f"attempt {attempt} · retry {retry} (interrupted)"
        calls += _calls(events_of(path), index, label, "interrupted")
    return trajectory, calls, marks


def _journal_views(
    root: Path, path: Path, index: int, label: str, attempt_retry: tuple[int, int]
) -> tuple[list[JournalView], list[CallPoint], list[MarkPoint]]:
    """One run of the loop's journal and its sub-agents' (each right after the run that
    called it), their model calls, and the marks of the loop's own journal."""
    attempt, retry = attempt_retry
    trajectory: list[JournalView] = []
    calls: list[CallPoint] = []
    marks: list[MarkPoint] = []
    runs = [(label, path)]
    for called in subagent_journals(path):
        runs.append((f"{label} · sub-agent {' › '.join(called.names)}", called.path))
    for name, journal in runs:
        recorded = read_journal_file(journal, _READ)
        events = recorded.events
        started = next((e for e in events if isinstance(e, RetryStarted)), None)
        trajectory.append(
            {
                "label": name,
                "attempt": attempt,
                "retry": retry,
                "subagent": journal is not path,
                "journal": journal.relative_to(root).as_posix(),
                "carried_post_mortems": started.carried_post_mortems if started else None,
                "events": [
                    compact_event(line, size)
                    for line, size in zip(recorded.lines, recorded.sizes, strict=True)
                ],
            }
        )
        calls += _calls(events, index, name, None if journal is path else "subagent")
        if journal is path:
            marks += _marks(events, index, label)
    return trajectory, calls, marks


def _call_kind(event: LLMCall | ClosingCall | ReplyCut) -> str:
    if isinstance(event, LLMCall):
        return "loop"
    if isinstance(event, ReplyCut):
        return "reply_cut"
    return event.purpose


def _calls(events: list[Event], task: int, label: str, kind: str | None) -> list[CallPoint]:
    """The journal's model calls; ``kind`` overrides loop/closing-call purpose."""
    out: list[CallPoint] = []
    for event in events:
        if not isinstance(event, LLMCall | ClosingCall | ReplyCut):
            continue
        usage = event.usage
        out.append(
            {
                "task": task,
                "run": label,
                "turn": event.turn,
                "kind": kind or _call_kind(event),
                "ts": event.ts,
                "input": usage.input_tokens,
                "cache_read": usage.cache_read_tokens,
                "output": usage.output_tokens,
            }
        )
    return out


_MARKS: dict[type[Event], str] = {
    WindowExhausted: "window guard",
    Compacted: "compaction",
    CompactionFailed: "compaction failed",
    Looping: "looping",
}


def _marks(events: list[Event], task: int, label: str) -> list[MarkPoint]:
    """Where the guard, a compaction or the loop check acted, at the prompt size of the
    call that came before (so the mark sits on the task's curve)."""
    out: list[MarkPoint] = []
    tokens = 0
    for event in events:
        if isinstance(event, LLMCall):
            tokens = event.usage.input_tokens
        elif isinstance(event, WindowExhausted | Compacted | CompactionFailed | Looping):
            at = (
                event.tokens_before
                if isinstance(event, Compacted)
                else event.estimate
                if isinstance(event, WindowExhausted)
                else None
            )
            out.append(
                {
                    "task": task,
                    "run": label,
                    "turn": event.turn,
                    "kind": _MARKS[type(event)],
                    "input": at or tokens,
                }
            )
    return out


def compact_event(event: Event | JSONObject, line_chars: int | None = None) -> JSONObject:
    """One journal event as the viewer shows it: its line (as read, or the event's
    ``records.codec.encode``) with long texts clipped and replay-only fields dropped.
    ``line_chars``, the length of the line as read: a line no longer than the smallest
    limit holds no text to clip, and most lines are such (the walk through every
    value is most of a large report's writing time)."""
    line = encode(event) if isinstance(event, Event) else event
    kind = line.get("event")
    if line_chars is not None and line_chars <= _SMALLEST_LIMIT and kind != "tool_results":
        return {key: value for key, value in line.items() if key not in _DROPPED_FIELDS}
    out: JSONObject = {}
    for key, value in line.items():
        if key in _DROPPED_FIELDS:
            continue
        if key == "results" and kind == "tool_results" and isinstance(value, list):
            out[key] = [_result(r) for r in value]
        elif key in ("message", "task", "text", "notes", "reply", "answer"):
            out[key] = _clip_all(value, TEXT_LIMIT)
        else:
            out[key] = _clip_all(value, FIELD_LIMIT)
    return out


def _result(result: Any) -> Any:
    """A tool result clipped, with the length it had (``chars``)."""
    if not isinstance(result, dict):
        return _clip_all(result, RESULT_LIMIT)
    content = result.get("content")
    return {
        **_clip_all(result, RESULT_LIMIT),
        "chars": len(content) if isinstance(content, str) else None,
    }


def _clip_all(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return clip(value, limit)
    if isinstance(value, dict):
        return {k: _clip_all(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip_all(v, limit) for v in value]
    return value


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… [{len(text) - limit:,} more characters in the journal]"


def _text(value: object) -> str | None:
    if value is None:
        return None
    return clip(value if isinstance(value, str) else json.dumps(value), FIELD_LIMIT)
