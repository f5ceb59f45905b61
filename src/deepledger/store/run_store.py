"""The run store: one run directory, held by one process, its manifest, results,
progress and journals.

What each file is and where it lives is drawn in ``layout.py``; how they are written so
that a crash never tears one, in ``files.py``.

One process at a time: a ``RunStore`` holds the folder's lock while it is open
(``lock.py``: the checks and the lock). A disk that fills while the run goes stops the
run with a :class:`RunDirectoryError`: what was recorded stays valid, and the same
command resumes once there is space.

A resume whose settings differ from the last run's is refused unless allowed (see
``run_config.py`` for which keys count).
"""

from __future__ import annotations

import fcntl
import json
import platform
import subprocess
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

from deepledger import __version__
from deepledger.errors import DeepLedgerError, RunDirectoryError
from deepledger.messages import JSONObject, Usage
from deepledger.records.codec import decode, event_name
from deepledger.records.events import ClosingCall, LLMCall
from deepledger.records.manifest import Manifest, RunEntry
from deepledger.records.results import (
    AttemptFinished,
    AttemptRecord,
    ConfigBreakdown,
    RetryFinished,
    RetryRecord,
    SummaryRecord,
    TaskRecord,
)
from deepledger.store.files import (
    append_encoded,
    encode_lines,
    flush_to_disk,
    latest_records,
    read_jsonl,
    write_json_atomic,
    write_text_atomic,
)
from deepledger.store.journal import Journal, writers_seconds
from deepledger.store.layout import (
    MANIFEST,
    RunLayout,
    attempt_journals,
    memory_folder,
    set_aside,
    subagents_folder,
)
from deepledger.store.lock import adopt, started, unusable
from deepledger.store.redaction import redact
from deepledger.store.run_config import (
    config_breakdown,
    config_differences,
    config_id,
    resume_changes,
)

_MODEL_CALLS = (event_name(LLMCall), event_name(ClosingCall))  # the events that bill tokens
_VERSIONED = ("openai", "anthropic", "mcp", "hydra-core", "omegaconf", "tiktoken")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def load_manifest(root: Path) -> tuple[JSONObject, JSONObject]:
    """The run directory's manifest and the config of its newest run, as read (JSON: see
    ``records/manifest.py`` for what they hold); a clear error for a folder that is not a
    run directory or whose manifest cannot be read."""
    path = RunLayout(root).manifest
    if not root.is_dir():
        raise DeepLedgerError(f"{root} is not a folder.")
    if not path.is_file():
        raise DeepLedgerError(
            f"{root} is not a deepledger run directory (no {MANIFEST}). Pass the folder a "
            "`deepledger bench` run wrote (its hydra.run.dir)."
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        config = manifest["runs"][-1]["config"] if manifest.get("runs") else manifest["config"]
        config["benchmark"]["name"], config["benchmark"]["execution"]["pass_at_k"]  # needed
    except (OSError, json.JSONDecodeError, KeyError, TypeError, IndexError) as exc:
        raise DeepLedgerError(f"{path} is unreadable or incomplete ({exc!r}).") from exc
    return manifest, config


def task_records(root: Path) -> dict[str, TaskRecord]:
    """Each task's newest record in ``root``'s results, in first-seen order (a task that
    errored is run again on resume, and its new line supersedes the old one)."""
    lines = latest_records(read_jsonl(RunLayout(root).results))
    return {task_id: TaskRecord.load(line) for task_id, line in lines.items()}


@dataclass
class TaskProgress:
    """What earlier runs finished of one task."""

    attempts: list[AttemptFinished] = field(default_factory=list)  # finished attempts
    retries: list[RetryFinished] = field(default_factory=list)  # of the unfinished attempt


class RunStore:
    """One run directory, held exclusively while open: two processes appending to the
    same results would record tasks twice.

    A *worker* store (``RunStore.for_worker``, the Ray backend's workers) writes only
    tasks' progress and journals, into the folder the driver's store holds: it takes no
    lock and refuses to write results, the summary or the manifest, which are the
    driver's. Each task runs in one worker at a time, so its files have one writer."""

    def __init__(self, root: Path, *, worker_config_id: str | None = None) -> None:
        self.root = root
        self.layout = RunLayout(root)
        self._results_lock = threading.Lock()  # results lines come from worker threads
        self._task_dirs: set[Path] = set()  # made already
        self._progress_written: set[Path] = set()  # progress files it appended to
        self.config_id: str | None = worker_config_id  # of this run's settings, once started
        self.worker = worker_config_id is not None
        self._lock: BinaryIO | None = None if self.worker else adopt(root)  # closed by close()
        try:
            self.layout.tasks.mkdir(exist_ok=True)
        except OSError as exc:
            self.close()
            raise unusable(root, "hydra.run.dir", exc) from exc

    @classmethod
    def for_worker(cls, root: Path, config_id: str) -> RunStore:
        """A worker's view of the run the driver holds; its lines carry ``config_id``,
        the driver's run's (``RunStore.start``)."""
        return cls(root, worker_config_id=config_id)

    def close(self) -> None:
        if self._lock is not None and not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def _driver_only(self, what: str) -> None:
        if self.worker:
            raise RuntimeError(f"a worker's run store does not write {what}: the driver does")

    @property
    def results_path(self) -> Path:
        return self.layout.results

    def task_dir(self, task_id: str) -> Path:
        path = self.layout.task_dir(task_id)
        if path not in self._task_dirs:  # each mkdir is a system call; tasks ask often
            path.mkdir(parents=True, exist_ok=True)
            self._task_dirs.add(path)
        return path

    # -- manifest ---------------------------------------------------------------------
    def _manifest(self) -> Manifest | None:
        path = self.layout.manifest
        if not path.exists():
            return None
        return Manifest.load(json.loads(path.read_text(encoding="utf-8")))

    def check_resume(self, config: JSONObject, allow_change: bool) -> list[str]:
        """Refuse (:class:`RunDirectoryError`, nothing written) a resume whose settings
        differ from the last run's in keys that count, unless ``allow_change``; refuse a
        change of judge once a task was judged, allowed or not. Return the counted
        differences a permitted resume goes on with."""
        manifest = self._manifest()
        if manifest is None:
            return []
        counted, judge = resume_changes(manifest.last_config, redact(config))
        if judge and any(r.judgement for r in self.latest_results().values()):
            raise RunDirectoryError(
                f"{self.root} holds tasks judged with other settings:\n  "
                + "\n  ".join(judge)
                + "\nOne accuracy never mixes two judges, not even with "
                "resume.allow_config_change=true. To grade these answers with this judge "
                f"without running the agent again: deepledger judge {self.root} "
                "benchmark.judge.KEY=VALUE ... (a judging beside the run's own); or choose "
                "a new hydra.run.dir=... for this judge."
            )
        if counted and not allow_change:
            raise RunDirectoryError(
                f"{self.root} was run with other settings; resuming with these would mix "
                "them in one summary:\n  "
                + "\n  ".join(counted)
                + "\nRun with the same settings, choose a new hydra.run.dir=... for these, "
                "or add resume.allow_config_change=true to resume anyway (each task then "
                "records the settings it ran under, and the summary counts them apart)."
            )
        return counted

    def planned_config_id(self, config: JSONObject) -> str:
        """The ``config_id`` that ``start(config, ...)`` gives this run, known before it
        (the Ray workers start, and carry it, before the manifest changes)."""
        return config_id(redact(config))

    def start(self, config: JSONObject, argv: list[str], tasks: int) -> list[str]:
        """Record this run in the manifest; return how its config differs from the last
        run's. ``config``: as recorded (``config.as_record``). The first run's config stays
        at the top; each run keeps its own, and its ``config_id``, which every result and
        progress line of this run carries."""
        self._driver_only("the manifest")
        started(self.root)  # from here on a refusal leaves the folder (store/lock.py)
        redacted: JSONObject = redact(config)
        self.config_id = self.planned_config_id(config)
        manifest = self._manifest() or Manifest(created_at=now(), config=redacted, runs=[])
        last = manifest.last_config
        manifest.tasks_expected = tasks
        # Every field given, null ones too: the entry is written with all of them.
        entry = RunEntry(
            started_at=now(),
            finished_at=None,
            argv=redact(argv),
            config=redacted,
            config_id=self.config_id,
            versions=versions(),
            git_commit=git_commit(),
        )
        manifest.runs.append(entry)
        write_json_atomic(self.layout.manifest, manifest.to_json())
        return config_differences(last, redacted) if len(manifest.runs) > 1 else []

    def finish(self) -> None:
        """Note the end of this run in the manifest."""
        self._driver_only("the manifest")
        manifest = self._manifest()
        assert manifest is not None and manifest.runs, "finish() follows start()"
        manifest.runs[-1].finished_at = now()
        write_json_atomic(self.layout.manifest, manifest.to_json())

    # -- results ----------------------------------------------------------------------
    def latest_results(self) -> dict[str, TaskRecord]:
        """Each task's newest line (a task that errored is run again on resume, and its
        new line supersedes the old one)."""
        return task_records(self.root)

    def finished_results(self) -> dict[str, TaskRecord]:
        """The tasks that are done: a resume does not run or judge them again. A task
        whose answer was left unjudged (the judge's model failed) is not: a resume
        judges it from its recorded answer."""
        return {
            k: r
            for k, r in self.latest_results().items()
            if r.status == "finished" and not _unjudged(r)
        }

    def set_aside_results(self, task_ids: Iterable[str]) -> int:
        """Move every result line of these tasks (their inputs changed: bench/inputs.py)
        out of the results, to ``superseded/``: each reader of the results (the resume,
        the summary, the live and final report, `deepledger report`) takes a task's newest
        line, and none may take one that answered other inputs, even when the run stops
        before the task has a new one. The lines are added there first, then the results
        replaced whole without them, both flushed to disk: a run killed between the two
        still finds them in the results, and moves them again (a line kept already is
        not kept twice). How many lines moved."""
        self._driver_only("results")
        wanted = set(task_ids)
        with self._results_lock:
            path = self.results_path
            if not wanted or not path.exists():
                return 0
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
            moving = {index for index, line in enumerate(lines) if _task_id_of(line) in wanted}
            if not moving:
                return 0
            _keep_once(self.layout.superseded_results, [lines[i] for i in sorted(moving)])
            rest = "".join(line for index, line in enumerate(lines) if index not in moving)
            write_text_atomic(path, rest, 0o644, sync=True)
        return len(moving)

    def replaced_results(self) -> frozenset[str]:
        """The tasks whose result lines :meth:`set_aside_results` moved, this run or an
        earlier one: each line the results hold for them answers their inputs now."""
        return frozenset(
            str(line["task_id"])
            for line in read_jsonl(self.layout.superseded_results)
            if "task_id" in line
        )

    def add_result(self, record: TaskRecord) -> None:
        """Append one task's record, flushed to disk before this returns."""
        self.add_results([record])

    def add_results(self, records: Sequence[TaskRecord]) -> None:
        """Append these tasks' records in one write and one ``fsync``: the runner gives
        all that ended while the last flush was on its way (group commit). Safe to call
        from worker threads: the runner does, so that the flush does not hold up every
        other task."""
        self.append_results(self.result_lines(records))

    def result_lines(self, records: Sequence[TaskRecord]) -> bytes:
        """The lines :meth:`add_results` appends for ``records``, encoded: what Python
        does of them, for the event loop (see :meth:`append_progress`)."""
        return encode_lines([self._stamped(record).to_json() for record in records])

    def append_results(self, lines: bytes) -> None:
        """Append ``lines`` (:meth:`result_lines`) to the results in one write and one
        ``fsync``: the file system's part of :meth:`add_results`."""
        self._driver_only("results")
        with self._results_lock:  # a few appends a run: each looks for a torn last line
            append_encoded(self.results_path, lines)

    def _stamped(self, record: TaskRecord) -> TaskRecord:
        """``record`` with the config_id of this run on the task and on every attempt and
        retry done now (those resumed from an earlier run keep theirs)."""
        if self.config_id is None:
            return record
        mine = self.config_id
        attempts = [
            attempt.model_copy(
                update={
                    "config_id": attempt.config_id or mine,
                    "retries": [
                        r.model_copy(update={"config_id": r.config_id or mine})
                        for r in attempt.retries
                    ],
                }
            )
            for attempt in record.attempts
        ]
        return record.model_copy(update={"config_id": mine, "attempts": attempts})

    def write_summary(self, summary: SummaryRecord) -> None:
        """Write ``summary`` (``metrics.summarize``'s), adding to it (in place) how many
        tasks ran under each of the run's settings when a permitted resume changed them."""
        self._driver_only("the summary")
        if breakdown := config_breakdown(self.root):
            summary.configs = ConfigBreakdown.model_validate(breakdown)
        write_json_atomic(self.layout.summary, summary.to_json())

    # -- per-task progress and journals -----------------------------------------------
    def untouched(self, task_ids: Iterable[str]) -> frozenset[str]:
        """Those of ``task_ids`` no run has left anything of here (no folder): one
        listing of the tasks folder, where asking each task's files is several system
        calls a task."""
        there = (
            {path.name for path in self.layout.tasks.iterdir()}
            if self.layout.tasks.exists()
            else set()
        )
        return frozenset(t for t in task_ids if self.layout.task_dir(t).name not in there)

    def progress(self, task_id: str) -> TaskProgress:
        done = TaskProgress()
        for line in read_jsonl(self.layout.progress(task_id)):
            if line.get("event") == "attempt_finished":
                attempt = AttemptFinished.load(line)
                # An attempt judged again (it was unjudged: bench/runner.py) replaces
                # its earlier line.
                done.attempts = [a for a in done.attempts if a.attempt != attempt.attempt]
                done.attempts.append(attempt)
                done.retries = []
            elif line.get("event") == "retry_finished":
                done.retries.append(RetryFinished.load(line))
        return done

    def record_progress(
        self,
        task_id: str,
        finished: RetryRecord | AttemptRecord,
        *,
        sync: bool = True,
        digest: str | None = None,
    ) -> None:
        """Append a ``retry_finished`` or ``attempt_finished`` line for ``finished``,
        stamped with this run's config_id, the time and the task's input ``digest``;
        flushed to disk with ``sync`` (without, :meth:`flush_progress` does it before
        the task goes on)."""
        self.append_progress(task_id, self.progress_line(finished, digest), sync=sync)

    def progress_line(
        self, finished: RetryRecord | AttemptRecord, digest: str | None = None
    ) -> bytes:
        """The line :meth:`record_progress` appends for ``finished``, encoded: what
        Python does of it, for the event loop (see :meth:`append_progress`)."""
        line_class = RetryFinished if isinstance(finished, RetryRecord) else AttemptFinished
        fields = finished.model_dump(exclude={"schema_version", "ts", "event"})
        stamps = {"ts": now(), "config_id": self.config_id, "input_digest": digest}
        line = line_class.model_validate(fields | stamps)
        return encode_lines([line.to_json()])

    def progress_digest(self, task_id: str) -> str | None:
        """The input digest the task's newest progress line ran on (None: no line, or
        one written before digests)."""
        lines = read_jsonl(self.layout.progress(task_id))
        digest = lines[-1].get("input_digest") if lines else None
        return digest if isinstance(digest, str) else None

    def set_aside_task(self, task_id: str) -> Path | None:
        """Move the task's folder (progress, journals, notes) to ``superseded/``: what
        it holds answered other inputs, and its post-mortems must not be carried into
        the new question's retries. The folder it went to; None: there was none."""
        self._driver_only("a task's folder")
        folder = self.layout.task_dir(task_id)
        if not folder.exists():
            return None
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        target = self.layout.superseded_dir(task_id, stamp)
        target.parent.mkdir(exist_ok=True)
        folder.rename(target)
        self._task_dirs.discard(folder)
        self._progress_written.discard(self.layout.progress(task_id))
        return target

    def append_progress(self, task_id: str, line: bytes, *, sync: bool) -> None:
        """Append ``line`` (:meth:`progress_line`) to the task's progress: the file
        system's part of :meth:`record_progress`, a few system calls for a worker
        thread."""
        self.task_dir(task_id)
        path = self.layout.progress(task_id)
        # A file whose last line this store wrote is not read back for one a crash cut.
        append_encoded(path, line, sync=sync, ends_whole=path in self._progress_written)
        self._progress_written.add(path)

    def flush_progress(self, task_id: str) -> None:
        """Flush to disk the progress lines written without (``record_progress``)."""
        flush_to_disk(self.layout.progress(task_id))

    def journal_path(self, task_id: str, attempt: int, retry: int) -> Path:
        """Where the journal of one retry is (or will be) written."""
        return self.layout.journal(task_id, attempt, retry)

    def journal(self, task_id: str, attempt: int, retry: int, *, resume: bool = False) -> Journal:
        """The journal of one retry. One a killed run left is set aside (the retry starts
        afresh), or with ``resume`` appended to (benchmark.execution.resume=turn: the
        retry goes on from it, so do its memory notes and sub-agent folders), once no
        other process writes it (``JournalBusyError`` until then: ``Journal.reopen``)."""
        self.task_dir(task_id)
        path = self.layout.journal(task_id, attempt, retry)
        if path.exists() and not resume:  # left by a run that was killed: start afresh
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
            path.rename(set_aside(path, stamp))
            subagents = subagents_folder(path)
            if subagents.exists():
                subagents.rename(set_aside(subagents, stamp))
            # The attempt starts afresh, so do its memory notes.
            memory = memory_folder(path)
            if retry == 0 and memory.exists():
                memory.rename(set_aside(memory, stamp))
        return Journal.reopen(path) if resume else Journal(path)

    def interrupted_usages(self, task_id: str) -> list[Usage]:
        """The usage of every model call recorded in journals a killed run left behind:
        those tokens were spent (and billed) even though the retry is being redone. A
        line that does not decode is skipped (a killed run may have left anything)."""
        usages = []
        for _, _, journal in attempt_journals(self.task_dir(task_id), interrupted=True):
            for line in read_jsonl(journal):
                if line.get("event") not in _MODEL_CALLS:
                    continue
                try:
                    event = decode(line)
                except ValueError:
                    continue
                if isinstance(event, LLMCall | ClosingCall):
                    usages.append(event.usage)
        return usages

    def killed_seconds(self, task_id: str, attempt: int, retry: int) -> float:
        """The time killed runs worked on the task's retries that no record holds, from
        their journals' stamps: those set aside, and the unfinished journal of the retry
        the task goes on with (``attempt``, ``retry``), resumed or set aside next."""
        journals = [
            path for _, _, path in attempt_journals(self.task_dir(task_id), interrupted=True)
        ]
        unfinished = self.layout.journal(task_id, attempt, retry)
        if unfinished.exists():
            journals.append(unfinished)
        return sum(writers_seconds(path) for path in journals)

    def relative(self, path: Path | None) -> str | None:
        return str(path.relative_to(self.root)) if path else None


def _unjudged(record: TaskRecord) -> bool:
    return any(a.judgement is not None and a.judgement.unjudged for a in record.attempts)


def _keep_once(path: Path, lines: list[str]) -> None:
    """Append to ``path`` those of ``lines`` it does not hold yet, flushed to disk."""
    held = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    known = set(held.splitlines())
    new = [line.rstrip("\n") + "\n" for line in lines if line.rstrip("\n") not in known]
    if new:
        path.parent.mkdir(exist_ok=True)
        append_encoded(path, "".join(new).encode("utf-8"))


def _task_id_of(line: str) -> object:
    """The task id of one results line as read (None: a line a crash cut short)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record.get("task_id") if isinstance(record, dict) else None


def versions() -> dict[str, str]:
    found = {"deepledger": __version__, "python": platform.python_version()}
    for name in _VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def git_commit() -> str | None:
    """The commit of the deepledger checkout in use, if it is one."""
    source = Path(__file__).resolve().parents[3]
    try:
        run = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return run.stdout.strip() or None if run.returncode == 0 else None
