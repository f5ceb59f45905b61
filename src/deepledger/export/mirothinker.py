"""The ``mirothinker`` export: bench runs as the log folder of a MiroThinker benchmark.

``out`` becomes a MiroThinker results folder (what its ``run_evaluate_multiple_runs_*.sh``
scripts fill): one ``run_N/`` per run given, in the order given, each holding a task log
``task_<id>_attempt-<A>_format-retry-<R>_<start>.json`` per attempt journal, and, once
the run has every task's result, ``benchmark_results.jsonl`` and
``benchmark_results_pass_at_<k>_accuracy.txt``. MiroThinker's average-score script and
its ``check_progress_*.py`` read it; docs/mirothinker.md says which file and field each
reads and how every field here is filled from the run.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from deepledger.context.replay import follow_history
from deepledger.errors import ConfigError
from deepledger.export.request import ExportOutcome, ExportRequest
from deepledger.llm.openai import to_wire_messages
from deepledger.messages import JSONObject, Message
from deepledger.records.codec import encode, read_journal
from deepledger.records.events import (
    AssistantTurn,
    Event,
    RetryStarted,
    TaskFinished,
    TaskStarted,
    ToolResults,
)
from deepledger.records.results import AttemptRecord, TaskRecord
from deepledger.store.files import write_json_atomic
from deepledger.store.layout import (
    RESULTS,
    RunLayout,
    attempt_journals,
    safe_name,
    subagent_journals,
)
from deepledger.store.locate import require_run
from deepledger.store.redaction import redact_exported
from deepledger.store.run_store import load_manifest, task_records
from deepledger.tools.protocols import make_protocol

# MiroThinker's answer when a reply has no \boxed{} (its check_progress counts these).
FORMAT_ERROR = "No \\boxed{} content found in the final answer."
# MiroThinker stamps its task logs in UTC+8, to the second, with no offset written.
_MIRO_ZONE = timezone(timedelta(hours=8))
_MIRO_TIME = "%Y-%m-%d %H:%M:%S"
# check_progress takes a task's id from its file name up to the first "_"
# (``task_([^_]+(?:-[^_]+)*)``): a file name's id keeps to these characters.
_FILE_ID = re.compile(r"^[A-Za-z0-9.-]+$")
_NOT_FILE_ID = re.compile(r"[^A-Za-z0-9.-]+")
# MiroThinker's results file has our results file's name (ours was named after it).
_RESULTS = RESULTS
# MiroThinker's grammar of a task log's id, ``<id>_attempt-<a>_format-retry-<r>``: its
# names, not our run folder's (store/layout.py alone spells those).
_ATTEMPT, _RETRY = "attempt", "format-retry"


@dataclass
class _Run:
    """One bench run, read: its settings, its task records and its tasks' journals."""

    root: Path
    k: int
    config: JSONObject
    records: dict[str, TaskRecord]
    journals: dict[str, list[tuple[int, int, Path]]]  # task id -> (attempt, retry, path)
    complete: bool  # every task it expected has a result line


@dataclass
class _Written:
    """The task logs written for one task: by attempt, the answering retry's file."""

    files: dict[int, Path] = field(default_factory=dict)
    last_start: datetime | None = None


def export_mirothinker(request: ExportRequest) -> ExportOutcome:
    """Write ``request.run_dirs`` into the folder ``request.out`` as MiroThinker's
    ``run_1/``, ``run_2/``, ... (every run is read before anything is written)."""
    _check_out(request.out)
    runs = [_read_run(root) for root in _distinct(request.run_dirs)]
    ks = {run.k for run in runs}
    if len(ks) > 1:
        said = ", ".join(f"{run.root}: {run.k}" for run in runs)
        raise ConfigError(
            f"deepledger export mirothinker: the runs have different pass@k ({said}); "
            "MiroThinker's average-score script averages runs of one k: export them apart."
        )
    outcome = ExportOutcome()
    for number, run in enumerate(runs, 1):
        _write_run(run, request.out / f"run_{number}", outcome, request)
    return outcome


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError(
            f"deepledger export mirothinker: {out} is a file; the mirothinker format writes "
            "a folder: name a new or empty folder."
        )
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError(
            f"deepledger export mirothinker: {out} already holds files; name a new or empty "
            "folder (nothing was written)."
        )


def _distinct(roots: tuple[Path, ...]) -> list[Path]:
    if not roots:
        raise ConfigError("deepledger export mirothinker: no run folder given.")
    seen: dict[Path, Path] = {}
    for root in roots:
        key = root.resolve()
        if key in seen:
            raise ConfigError(
                f"deepledger export mirothinker: {root} is given twice; each run folder "
                "becomes one run_N/ of MiroThinker's, so give each once."
            )
        seen[key] = root
    return list(seen.values())


def _read_run(root: Path) -> _Run:
    require_run(root, "export", ("bench",))
    manifest, config = load_manifest(root)
    records = task_records(root)
    by_folder = {safe_name(task_id): task_id for task_id in records}
    journals: dict[str, list[tuple[int, int, Path]]] = {}
    for name, folder in RunLayout(root).task_dirs().items():
        found = attempt_journals(folder)
        task_id = by_folder.get(name) or _journaled_id(found)
        if task_id is not None and found:
            journals[task_id] = found
    expected = manifest.get("tasks_expected")
    complete = set(journals) <= set(records) and len(records) >= (expected or 0)
    k = int(config["benchmark"]["execution"]["pass_at_k"])
    return _Run(root, k, config, records, journals, complete)


def _journaled_id(journals: list[tuple[int, int, Path]]) -> str | None:
    """The task id a journal of a task with no result line yet names."""
    for _, _, path in journals:
        for event in read_journal(path):
            if isinstance(event, RetryStarted):
                return event.task_id
    return None


def _write_run(run: _Run, folder: Path, outcome: ExportOutcome, request: ExportRequest) -> None:
    folder.mkdir(parents=True)
    results: list[JSONObject] = []
    for task_id in _task_order(run):
        record = run.records.get(task_id)
        written = _write_task_logs(run, task_id, record, folder, outcome)
        if record is not None:
            results.append(_result_line(record, written, run.k, request))
    if not run.complete:  # MiroThinker writes these two once its run has ended
        outcome.skip(f"{run.root}: unfinished run, no {_RESULTS} nor accuracy file")
        return
    lines = "".join(
        json.dumps(redact_exported(line), ensure_ascii=False) + "\n" for line in results
    )
    (folder / _RESULTS).write_text(lines, encoding="utf-8")
    passed = sum(1 for line in results if line["pass_at_k_success"])
    accuracy = passed / len(results) if results else 0.0
    accuracy_file = folder / f"benchmark_results_pass_at_{run.k}_accuracy.txt"
    accuracy_file.write_text(f"{accuracy:.2%}", encoding="utf-8")
    outcome.written += [folder / _RESULTS, accuracy_file]
    outcome.rows += len(results)


def _task_order(run: _Run) -> list[str]:
    return [*run.records, *(task_id for task_id in run.journals if task_id not in run.records)]


def file_id(task_id: str) -> str:
    """The task id as a task log's file name carries it: unchanged when it is made of
    letters, digits, ``.`` and ``-``; else those kept, the rest as ``-``, and a hash of
    the id so that two ids never share a name (the log's ``task_id`` keeps the id)."""
    if _FILE_ID.match(task_id):
        return task_id
    readable = _NOT_FILE_ID.sub("-", task_id).strip("-.")[:60] or "task"
    return f"{readable}-{hashlib.sha1(task_id.encode()).hexdigest()[:8]}"


def miro_task_id(task_id: str, attempt: int, retry: int) -> str:
    """The id MiroThinker gives one format-retry of one attempt at a task."""
    return f"{task_id}_{_ATTEMPT}-{attempt}_{_RETRY}-{retry}"


# -- the task logs --------------------------------------------------------------------
def _write_task_logs(
    run: _Run, task_id: str, record: TaskRecord | None, folder: Path, outcome: ExportOutcome
) -> _Written:
    written = _Written()
    journals = run.journals.get(task_id, [])
    last_retry = {attempt: retry for attempt, retry, _ in journals}  # the highest wins
    for attempt, retry, path in journals:
        events = read_journal(path)
        started = _started(events, written)
        judged = _attempt(record, attempt) if retry == last_retry[attempt] else None
        log = _task_log(run, (task_id, attempt, retry, path), events, started, record, judged)
        name = f"task_{miro_task_id(file_id(task_id), attempt, retry)}"
        stamp = log["start_time"].replace(":", "-").replace(".", "-").replace(" ", "-")
        target = folder / f"{name}_{stamp}.json"
        write_json_atomic(target, redact_exported(log))
        outcome.written.append(target)
        written.files[attempt] = target
    if not journals:
        outcome.skip("tasks with a result and no journal (no task log)")
    return written


def _started(events: list[Event], written: _Written) -> datetime:
    """The retry's start, kept after the one before it: MiroThinker stamps to the second
    and its progress script takes a task's newest log by this time, so a retry that
    began in the same second as the one before is stamped a second later."""
    begun = next((e.ts for e in events if e.ts), "")
    start = _parse(begun) or written.last_start or datetime.now(_MIRO_ZONE).replace(microsecond=0)
    if written.last_start is not None and start <= written.last_start:
        start = written.last_start + timedelta(seconds=1)
    written.last_start = start
    return start


def _parse(ts: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(_MIRO_ZONE).replace(microsecond=0)


def _attempt(record: TaskRecord | None, attempt: int) -> AttemptRecord | None:
    if record is None:
        return None
    return next((a for a in record.attempts if a.attempt == attempt), None)


def _task_log(
    run: _Run,
    journal: tuple[str, int, int, Path],
    events: list[Event],
    start: datetime,
    record: TaskRecord | None,
    judged: AttemptRecord | None,
) -> JSONObject:
    """One attempt journal as MiroThinker's TaskLog, its fields in its order."""
    task_id, attempt, retry, path = journal
    started = next((e for e in events if isinstance(e, TaskStarted)), None)
    finished = next((e for e in events if isinstance(e, TaskFinished)), None)
    status, error = _status(finished, record)
    end = _parse(finished.ts) if finished else _parse(events[-1].ts) if events else None
    if status != "running" and end is not None and end < start:
        end = start
    answer = _boxed(finished, judged)
    return {
        "status": status,
        "start_time": start.strftime(_MIRO_TIME),
        "end_time": end.strftime(_MIRO_TIME) if status != "running" and end else "",
        "task_id": miro_task_id(task_id, attempt, retry),
        "input": {
            "task_description": started.task if started else (record.question if record else ""),
            "task_file_name": record.file_path if record else None,
        },
        "ground_truth": (record.ground_truth or "") if record else "",
        "final_boxed_answer": answer,
        "final_judge_result": _label(judged) if judged else "",
        "judge_type": judged.judgement.judge if judged and judged.judgement else "",
        "eval_details": None,
        "error": error,
        "current_main_turn_id": finished.turns if finished else _turns(events),
        "current_sub_agent_turn_id": 0,
        "sub_agent_counter": len(subagent_journals(path)),
        "current_sub_agent_session_id": None,
        "env_info": _env_info(run),
        "log_dir": str(run.root),
        "main_agent_message_history": _history(started, events),
        "sub_agent_message_history_sessions": _sessions(path),
        "step_logs": [_step(event) for event in events],
        "trace_data": {"deepledger": _trace(finished, path.relative_to(run.root))},
    }


def _status(finished: TaskFinished | None, record: TaskRecord | None) -> tuple[str, str]:
    """MiroThinker's status and error: ``success`` for a retry that ran to its end
    (answered or not, as MiroThinker's pipeline says of a run that raised nothing);
    ``failed`` for one that stopped without an end in a task that has its result (an
    error ended it); ``running`` for one of a task still going, or stopped by a kill."""
    if finished is not None:
        return "success", ""
    if record is None:
        return "running", ""
    return "failed", record.error or "the attempt stopped before its end"


def _boxed(finished: TaskFinished | None, judged: AttemptRecord | None) -> str:
    if judged is not None and judged.final_answer:
        return judged.final_answer
    if finished is None:
        return ""
    return finished.answer or FORMAT_ERROR


def _label(attempt: AttemptRecord) -> str:
    """Our verdict as MiroThinker's judge writes it: CORRECT, INCORRECT or (a SimpleQA
    label) NOT_ATTEMPTED; no verdict (no ground truth, or the judge gave none): ""."""
    label = attempt.judgement.label if attempt.judgement else None
    if attempt.correct is True:
        return "CORRECT"
    if attempt.correct is False:
        return "NOT_ATTEMPTED" if label == "NOT_ATTEMPTED" else "INCORRECT"
    return ""


def _turns(events: list[Event]) -> int:
    return max((e.turn for e in events if isinstance(e, AssistantTurn)), default=0)


def _env_info(run: _Run) -> JSONObject:
    """MiroThinker's env_info keys, from the run's config (its secrets redacted)."""
    llm, agent = run.config.get("llm") or {}, run.config.get("agent") or {}
    subs = agent.get("sub_agents") or {}
    return {
        "llm_provider": llm.get("provider"),
        "llm_base_url": llm.get("base_url"),
        "llm_model_name": llm.get("model_name"),
        "llm_temperature": llm.get("temperature"),
        "llm_top_p": llm.get("top_p"),
        "llm_min_p": llm.get("min_p"),
        "llm_top_k": llm.get("top_k"),
        "llm_max_tokens": llm.get("max_tokens"),
        "llm_repetition_penalty": llm.get("repetition_penalty"),
        "llm_async_client": llm.get("async_client"),
        "keep_tool_result": agent.get("keep_tool_result"),
        "main_agent_max_turns": (agent.get("main_agent") or {}).get("max_turns"),
        **{f"sub_{name}_max_turns": (sub or {}).get("max_turns") for name, sub in subs.items()},
    }


def _history(started: TaskStarted | None, events: list[Event]) -> JSONObject:
    """``{"system_prompt", "message_history"}`` as MiroThinker keeps an agent's
    conversation: the task, then each reply and the tool results it got, in OpenAI's
    chat shape (the system prompt apart, as MiroThinker keeps it)."""
    if started is None:
        return {"system_prompt": "", "message_history": []}
    protocol = make_protocol(started.protocol)
    history: list[Message] = [Message.task(started.task, started.task_images)]
    for event in events:
        follow_history(history, event, protocol)
    return {
        "system_prompt": started.system_prompt or "",
        "message_history": to_wire_messages(history),
    }


def _sessions(journal: Path) -> JSONObject:
    """Each sub-agent run's conversation, named ``<agent>_<n>`` as MiroThinker names its
    sessions (a nested one: its callers' names joined by ``.`` before it; not ``/``, as
    collect-trace puts a session's name in a file name)."""
    sessions: JSONObject = {}
    for sub in subagent_journals(journal):
        events = read_journal(sub.path)
        started = next((e for e in events if isinstance(e, TaskStarted)), None)
        name = ".".join(_session_name(n) for n in sub.names)
        sessions[name] = _history(started, events)
    return sessions


def _session_name(stem: str) -> str:
    agent, _, number = stem.rpartition("-")
    return f"{agent}_{number}" if agent and number.isdigit() else stem


def _step(event: Event) -> JSONObject:
    """A journal line as one of MiroThinker's step logs; a reply's or a tool result's
    text is in the message history, so its step keeps the turn alone."""
    data = encode(event)
    name = str(data.get("event", ""))
    if isinstance(event, AssistantTurn | ToolResults):
        data = {"event": name, "turn": event.turn}
    for kept_apart in _IN_HISTORY:  # large, and in main_agent_message_history already
        data.pop(kept_apart, None)
    moment = _parse(event.ts)
    return {
        "step_name": name,
        "message": _step_message(data),
        "timestamp": moment.strftime(_MIRO_TIME) if moment else "",
        "info_level": _LEVELS.get(name, "info"),
        "metadata": data,
    }


_IN_HISTORY = ("system_prompt", "prompts")
_LEVELS = {
    "llm_call_failed": "error",
    "tool_server_unavailable": "warning",
    "rollback": "warning",
    "rollback_cap_reached": "warning",
    "looping": "warning",
    "limit_reached": "warning",
    "window_exhausted": "warning",
    "context_overflow": "warning",
    "compaction_failed": "warning",
}


def _step_message(data: JSONObject) -> str:
    said = [f"{k}={_short(v)}" for k, v in data.items() if k not in {"event", "ts"}]
    return ", ".join(said)[:500]


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _trace(finished: TaskFinished | None, journal: Path) -> JSONObject:
    """What MiroThinker's log has no field for: how the retry ended, its usage and
    cost, and the journal it came from (relative to the run folder)."""
    facts: JSONObject = {"journal": journal.as_posix()}
    if finished is not None:
        facts |= {
            "end_reason": str(finished.end_reason),
            "end_detail": finished.end_detail,
            "provenance": finished.provenance,
            "turns": finished.turns,
            "tool_calls": finished.tool_calls,
            "usage": encode(finished)["usage"],
            "cost": finished.cost,
        }
    return facts


# -- benchmark_results.jsonl ----------------------------------------------------------
def _result_line(
    record: TaskRecord, written: _Written, k: int, request: ExportRequest
) -> JSONObject:
    """The task as a line of MiroThinker's benchmark_results.jsonl (its BenchmarkResult,
    fields in its order). The task's answer and log are those of the attempt judged
    correct, so that collect-trace, which keeps the logs of PASS_AT_K_SUCCESS lines, keeps
    right answers (MiroThinker itself names the first attempt's there); with none
    correct, the first attempt's, as MiroThinker's."""
    attempts = [_attempt_line(a, written, request) for a in record.attempts]
    passed = record.correct is True or any(a["is_correct"] for a in attempts)
    main = next((a for a in attempts if a["is_correct"]), attempts[0] if attempts else {})
    if passed:
        verdict = "PASS_AT_K_SUCCESS"
    else:
        verdict = "TEST_SET_MODE" if record.ground_truth is None else "PASS_AT_K_FAILED"
    return {
        "task_id": record.task_id,
        "task_question": record.question,
        "ground_truth": record.ground_truth,
        "file_path": record.file_path,
        "status": "success" if record.status == "finished" else "failed",
        "model_boxed_answer": main.get("model_boxed_answer") or (record.final_answer or ""),
        "metadata": record.metadata,
        "error_message": record.error or "",
        "final_judge_result": verdict,
        "judge_type": "pass_at_k",
        "log_file_path": main.get("log_file_path"),
        "attempts": attempts,
        "pass_at_k_success": passed,
        "k_value": k,
    }


def _attempt_line(attempt: AttemptRecord, written: _Written, request: ExportRequest) -> JSONObject:
    """One attempt of a result line; its log named where it will be once the export is
    in place (MiroThinker's scripts open the absolute path)."""
    log = written.files.get(attempt.attempt)
    return {
        "attempt_number": attempt.attempt,
        "model_boxed_answer": attempt.final_answer or FORMAT_ERROR,
        "status": "success",  # an attempt with a record ran to its end
        "log_file_path": str(request.final(log).resolve()) if log else None,
        "final_judge_result": _label(attempt) or None,
        "judge_type": attempt.judgement.judge if attempt.judgement else None,
        "is_correct": attempt.correct is True,
    }
