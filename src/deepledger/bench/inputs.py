"""What a task's result answered, and which recorded results a resume must not keep.

A result holds for the question the agent was asked, the attached file it read, the
ground truth it was judged against and the judge that decided. A resume after the user
edited the task file (or the attachment, or the judge model's preset) under the same
``task_id`` would otherwise count an answer to another question. So each task carries a
digest of those inputs (:func:`input_digest`: sha256 over a canonical JSON encoding),
written on its result line (``TaskRecord.input_digest``) and on every line of its
``progress.jsonl``.

On resume (:func:`check_inputs`), a task whose newest result line or progress was written
for other inputs has *changed*: by default (``resume.on_changed_tasks=rerun``) it runs
again from its start — its result lines and its folder are moved to ``superseded/``
(its post-mortems belong to the old question; every reader of the results takes a
task's newest line, which must not be the old one even if the run stops before the new
one is written), and its new line says ``inputs_changed``; with ``refuse`` the resume
stops before writing anything, naming the tasks.

A line written before digests cannot say everything it answered. Its question and
ground truth are on it, and are compared; when they match it is kept (the attachment and
the judge unverified), and the summary counts such lines (``inputs_changed.unverified``).
Keeping is what an older run directory did on resume, and re-running every task of
one would discard work that is most likely still valid.

The judge is part of a task's inputs only when it has a ground truth: a task that is
not judged keeps its result whatever the judge. A change of ``benchmark.judge`` keys is
refused on resume anyway (store/run_config.py); what only the digest sees is the judge's
llm preset edited in place (another model under the same preset name).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from deepledger.bench.judge_rules import template_digest
from deepledger.bench.metrics import plural
from deepledger.bench.tasks import Task
from deepledger.config import ChangedTasks, JudgeConfig, JudgeName, LLMConfig
from deepledger.errors import RunDirectoryError
from deepledger.messages import JSONObject
from deepledger.records.results import TaskRecord
from deepledger.store.run_store import RunStore

# Part of every digest: a new encoding of the inputs gets a new number, so a digest is
# never compared with one computed another way.
DIGEST_VERSION = 1
# The llm preset's keys that decide a judge model's verdict (not where it is served or
# how long it may take).
JUDGE_MODEL_KEYS = (
    "provider",
    "model_name",
    "model_path",
    "max_tokens",
    "temperature",
    "top_p",
    "extra_body",
    "reasoning_effort",
    "thinking",
)
IDS_SHOWN = 10  # task ids named in a message before "and N more"


def judge_identity(judge: JudgeConfig, model: LLMConfig | None = None) -> JSONObject:
    """What decides a verdict: the judge's kind, the keys that kind reads, and for the
    llm judge its rule, the model of its preset (``model``, with
    ``benchmark.judge.model`` in place) and ``benchmark.judge.base_url``."""
    identity: JSONObject = {"name": judge.name}
    if judge.name in (JudgeName.NUMERIC, JudgeName.LIST):
        identity |= {"rel_tol": judge.rel_tol, "abs_tol": judge.abs_tol}
    if judge.name == JudgeName.LIST:
        identity["ordered"] = judge.ordered
    if judge.name == JudgeName.LLM:
        identity["rule"] = judge.rule
        if judge.template is not None:  # another template text is another judge
            identity["template"] = template_digest(judge.template)
        identity["model"] = (
            {key: getattr(model, key) for key in JUDGE_MODEL_KEYS} if model else judge.llm
        )
        # benchmark.judge.model is in model_name already. A server the judge is pointed
        # at (a local one, a proxy) may serve another model under the same name: it
        # counts too, said only when given so that earlier runs' digests stay as they were.
        if judge.base_url:
            identity["base_url"] = judge.base_url
    return identity


def input_digest(task: Task, judge: JSONObject, attachment: str | None) -> str:
    """The sha256 of the task's inputs: question, ground truth, the attached file's name
    and content hash (``attachment``), and the judge when there is a truth to judge."""
    attached = {"name": Path(task.file_path).name, "sha256": attachment} if task.file_path else None
    inputs = {
        "version": DIGEST_VERSION,
        "question": task.question,
        "ground_truth": task.ground_truth,
        "attachment": attached,
        "judge": judge if task.ground_truth is not None else None,
    }
    canonical = json.dumps(
        inputs, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def file_sha256(path: str) -> str:
    with open(path, "rb") as attached:
        return hashlib.file_digest(attached, "sha256").hexdigest()


def _digested(tasks: list[Task], judge: JSONObject) -> list[Task]:
    digested = []
    for task in tasks:
        attachment = file_sha256(task.file_path) if task.file_path else None
        digested.append(replace(task, digest=input_digest(task, judge, attachment)))
    return digested


async def with_digests(tasks: list[Task], judge: JSONObject) -> list[Task]:
    """``tasks`` with their input digests; attached files are read on a thread."""
    return await asyncio.to_thread(_digested, tasks, judge)


@dataclass
class InputCheck:
    """What a resume found of the tasks' recorded work against their inputs now."""

    # Tasks whose result or progress answered other inputs: they run again.
    changed: list[str] = field(default_factory=list)
    # Of those, the ones whose folder holds the old inputs' work (the others' holds a
    # re-run of the new inputs that a killed run left: it goes on from there).
    set_aside: list[str] = field(default_factory=list)
    # Finished results written before digests, whose question and truth match: kept.
    unverified: list[str] = field(default_factory=list)


def check_inputs(run_dir: RunStore, tasks: list[Task]) -> InputCheck:
    """Compare each task's recorded result and progress with its inputs now (tasks
    without a digest are not compared). Reads a task's progress only when its result
    does not settle it."""
    check = InputCheck()
    latest = run_dir.latest_results()
    untouched = run_dir.untouched(task.task_id for task in tasks)
    for task in tasks:
        if task.digest is None:
            continue
        record = latest.get(task.task_id)
        recorded = _recorded_for(record, task)
        if record is not None and record.status == "finished" and recorded == "same":
            continue  # done, for these inputs
        worked_on = None if task.task_id in untouched else run_dir.progress_digest(task.task_id)
        if recorded == "changed" or worked_on not in (None, task.digest):
            check.changed.append(task.task_id)
            if worked_on != task.digest and task.task_id not in untouched:
                check.set_aside.append(task.task_id)
        elif record is not None and record.status == "finished" and recorded == "unknown":
            check.unverified.append(task.task_id)
    return check


def _recorded_for(record: TaskRecord | None, task: Task) -> str | None:
    """Whether ``record`` answered ``task``'s inputs: same, changed, or unknown (a line
    written before digests whose question and truth match); None: no record."""
    if record is None:
        return None
    if record.input_digest is not None:
        return "same" if record.input_digest == task.digest else "changed"
    written = record.model_fields_set
    if "question" in written and record.question != task.question:
        return "changed"
    if "ground_truth" in written and record.ground_truth != task.ground_truth:
        return "changed"
    return "unknown"


def named(task_ids: list[str]) -> str:
    """Some task ids for a message: the first few, and how many more."""
    shown = ", ".join(task_ids[:IDS_SHOWN])
    more = len(task_ids) - IDS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def refuse_changed(check: InputCheck, on_changed: str, root: Path) -> None:
    """With ``resume.on_changed_tasks=refuse``, stop a resume that would run changed
    tasks again (:class:`RunDirectoryError`, exit 2), before anything is written."""
    if not check.changed or on_changed != ChangedTasks.REFUSE:
        return
    raise RunDirectoryError(
        f"{root}: the inputs of {plural(len(check.changed), 'task')} changed since "
        f"{'its result was' if len(check.changed) == 1 else 'their results were'} recorded "
        f"(question, ground truth, attached file or judge): {named(check.changed)}. "
        "With resume.on_changed_tasks=refuse nothing was run or written. Restore those "
        "inputs, run with resume.on_changed_tasks=rerun to run the tasks again (their old "
        "results are then not counted), or choose a new hydra.run.dir=..."
    )


def start_over(
    run_dir: RunStore, check: InputCheck, tasks: list[Task]
) -> tuple[list[Task], list[str]]:
    """Make the changed tasks run again from their start: their recorded results and
    their folders go to ``superseded/`` (nothing that reads the results counts the old
    ones any more, whether or not this run gets to write new ones), and their new
    records will say ``inputs_changed``. The tasks so marked, and what to tell the user.

    Each step is whole and may be done again, so a run killed at any point leaves the
    next resume to finish it: lines still in the results answer other inputs and are
    moved then; a folder still in ``tasks/`` holds progress for other inputs and is set
    aside then. A task whose old lines were moved by a run killed before its new line
    is still marked: the moved lines name it (``RunStore.replaced_results``)."""
    run_dir.set_aside_results(check.changed)
    for task_id in check.set_aside:
        run_dir.set_aside_task(task_id)
    marked = set(check.changed) | run_dir.replaced_results()
    tasks = [replace(t, inputs_changed=True) if t.task_id in marked else t for t in tasks]
    return tasks, _said(check)


def _said(check: InputCheck) -> list[str]:
    said = []
    if check.changed:
        said.append(
            f"the inputs of {plural(len(check.changed), 'task')} changed since "
            "recorded (question, ground truth, attached file or judge); run again from "
            f"the start, the old results not counted: {named(check.changed)}"
        )
    if check.unverified:
        said.append(
            f"warning: {plural(len(check.unverified), 'finished task')} "
            f"{'was' if len(check.unverified) == 1 else 'were'} recorded before input "
            "digests; kept as recorded (question and ground truth match; the attached "
            "file and the judge are not checked)"
        )
    return said
