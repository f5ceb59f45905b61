"""The run directory's layout: every folder and file name in it, and nothing else.

::

    RUN_DIR/                       (= hydra.run.dir)
      .lock                        held by the process running in the folder
      .shared-check                backend=ray: a token the driver writes at start; every
                                   worker reads it and writes .shared-check.<worker> beside it
                                   (then removes that), proving it sees the same folder
      .hydra/                      Hydra's config.yaml, hydra.yaml, overrides.yaml (redacted),
                                   written once the lock is held (hydra.output_subdir is off)
      manifest.json                redacted config, versions, git commit, start/end times;
                                   each run's config_id
      benchmark_results.jsonl      one line per task that finished or failed (appended,
                                   one write each; a resume's newer line supersedes)
      summary.json                 the run's metrics (replaced atomically)
      tasks/<safe id>/
        progress.jsonl             the task's own journal: each finished retry and attempt
        attempt-A-retry-R.jsonl    the agent's journal of one run of the loop (records/events.py);
                                   its first line, journal_opened, names the schema version
                                   (none: written before typed records, schema 1)
        attempt-A-retry-R.subagents/  sub-agent journals (<agent>-<n>.jsonl, nested alike)
        attempt-A-retry-R.interrupted-<UTC stamp>.jsonl (and .subagents/)
                                   a retry a killed run left unfinished, kept when it is redone
        memory/attempt-A/          the memory tool's notes, shared by the attempt's retries
                                   (``.interrupted-<stamp>`` once a redone attempt set them aside)
        archive/attempt-A-retry-R/rN.txt  long tool results, paged through by handle rN
      superseded/<safe id>.<UTC stamp>/  a task's folder as it was when a resume found the
                                   task's inputs changed (question, ground truth, attached
                                   file or judge): the task runs again in a new tasks/<safe id>
      superseded/benchmark_results.jsonl  the result lines of those tasks, moved out of
                                   benchmark_results.jsonl at the same time (no reader of
                                   the results can take one for the task's newest)
      tool_servers/*.stderr.log    what the tool servers wrote on stderr
      replay.json                  what `deepledger replay` computed last
      report.html                  the run in a browser (`deepledger report` rebuilds it)

A ``deepledger run`` folder holds ``.hydra/``, ``tool_servers/`` and one journal,
``journal.jsonl``, with ``journal.subagents/``, ``memory/journal/`` and
``archive/journal/`` beside it.

Resume: the same command with the same run directory. Tasks whose newest line in
``benchmark_results.jsonl`` says ``finished`` are done and are not run or judged again
(a task that ended in an error is run again; its new line supersedes the old). For the
others, ``progress.jsonl`` says which attempts and format-retries finished (with their
post-mortems, which the next retry carries); an unfinished retry is run again from its
start, and its partial journal is kept beside the new one, renamed ``.interrupted``.
A task whose inputs changed since its newest line (or its progress) was written runs again
from its start, its result lines and its folder moved to ``superseded/`` first
(``bench/inputs.py``).

Who does what with these files: ``files.py`` (how a line is appended and a file replaced
so that no crash tears one), ``lock.py`` (``.lock``: one process per folder),
``run_store.py`` (the manifest, results, progress and journals of a run),
``run_config.py`` (which settings a resume may change), ``redaction.py`` (what keeps
secrets out), ``journal.py`` (one agent journal). This module is the only one that
spells a name of the layout or parses one back (``tests/test_layers.py`` checks).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

LOCK = ".lock"
SHARED_CHECK = ".shared-check"  # backend=ray: the folder every worker must see
HYDRA = ".hydra"
HYDRA_CONFIG = "config.yaml"  # the job's composed config
HYDRA_SETTINGS = "hydra.yaml"  # Hydra's own (the chosen presets among them)
HYDRA_OVERRIDES = "overrides.yaml"  # the command line's overrides
MANIFEST = "manifest.json"
RESULTS = "benchmark_results.jsonl"
SUMMARY = "summary.json"
TASKS = "tasks"
SUPERSEDED = "superseded"  # task folders of inputs that changed since (bench/inputs.py)
PROGRESS = "progress.jsonl"
MEMORY = "memory"
ARCHIVE = "archive"
TOOL_SERVER_LOGS = "tool_servers"
REPLAY = "replay.json"
JUDGINGS = "judgings"  # `deepledger judge`: one folder per judging of the run's answers
JUDGING = "judging.json"  # a judging's judge and overrides, to resume it with the same
REPORT = "report.html"
RUN_JOURNAL = "journal.jsonl"  # `deepledger run`'s one journal, at its folder's root
SUBAGENTS = ".subagents"
INTERRUPTED = ".interrupted-"
JOURNAL_SUFFIX = ".jsonl"
ATTEMPT_JOURNALS = f"{TASKS}/*/attempt-*{JOURNAL_SUFFIX}"  # as a glob, for messages too
SERVER_LOG_SUFFIX = ".stderr.log"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_JOURNAL_NAME = re.compile(r"^attempt-(\d+)-retry-(\d+)(?:\.interrupted-(.*))?\.jsonl$")


def safe_name(task_id: str) -> str:
    """A folder name for any task id: readable, and unique through a hash suffix."""
    readable = _UNSAFE.sub("_", task_id).strip("._")[:60] or "task"
    return f"{readable}-{hashlib.sha1(task_id.encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class JournalName:
    """What an attempt journal's file name says: which attempt and format-retry it is,
    and the stamp of the killed run that left it (None for a journal in use)."""

    attempt: int
    retry: int
    interrupted: str | None = None


def journal_name(attempt: int, retry: int) -> str:
    return f"attempt-{attempt}-retry-{retry}{JOURNAL_SUFFIX}"


def parse_journal_name(name: str) -> JournalName | None:
    """``attempt-A-retry-R.jsonl`` (or its ``.interrupted-<stamp>`` copy) read back; None
    for any other file name."""
    match = _JOURNAL_NAME.match(name)
    if match is None:
        return None
    return JournalName(int(match[1]), int(match[2]), match[3])


def attempt_journals(task_dir: Path, *, interrupted: bool = False) -> list[tuple[int, int, Path]]:
    """A task's attempt journals as ``(attempt, retry, path)`` in order: those in use, or
    (``interrupted``) the copies killed runs left."""
    found = []
    for path in task_dir.glob(f"attempt-*{JOURNAL_SUFFIX}"):
        name = parse_journal_name(path.name)
        if name is not None and (name.interrupted is not None) == interrupted:
            found.append((name.attempt, name.retry, path))
    return sorted(found)


def set_aside(path: Path, stamp: str) -> Path:
    """The name a killed run's journal, sub-agent folder or notes folder is kept under
    when its retry is redone: ``.interrupted-<stamp>`` before the suffix."""
    return path.with_name(f"{path.stem}{INTERRUPTED}{stamp}{path.suffix}")


def subagents_folder(journal: Path) -> Path:
    """Where the sub-agents a run of the loop called keep their journals."""
    return journal.with_suffix(SUBAGENTS)


@dataclass(frozen=True)
class SubagentJournal:
    """The journal of one sub-agent run, and the runs that led to it."""

    path: Path
    names: tuple[str, ...]  # from the one the loop called: ("browsing-2", "coding-1")


def subagent_journals(journal: Path) -> list[SubagentJournal]:
    """The journals of the sub-agent runs ``journal``'s run called, nested ones included:
    each right after the run that called it, ``browsing-2`` before ``browsing-10``."""
    return _called_from(journal, ())


def _called_from(journal: Path, names: tuple[str, ...]) -> list[SubagentJournal]:
    folder = subagents_folder(journal)
    if not folder.is_dir():
        return []
    found = []
    for child in sorted(folder.glob(f"*{JOURNAL_SUFFIX}"), key=lambda p: _natural(p.stem)):
        found.append(SubagentJournal(child, (*names, child.stem)))
        found += _called_from(child, (*names, child.stem))
    return found


def _natural(name: str) -> list[int | str]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def child_journal(journal: Path, name: str) -> Path:
    """The journal of sub-agent run ``name`` (``browsing-2``) called from ``journal``."""
    return journal.parent / f"{journal.stem}{SUBAGENTS}" / f"{name}{JOURNAL_SUFFIX}"


def memory_folder(journal: Path) -> Path:
    """Where a task attempt's notes live: beside its journal, shared by the attempt's
    format-retries (``attempt-2-retry-1.jsonl`` -> ``memory/attempt-2``)."""
    return journal.parent / MEMORY / journal.stem.split("-retry-", 1)[0]


def archive_folder(journal: Path) -> Path:
    """Where a run of the loop archives its long results: beside its journal."""
    return journal.parent / ARCHIVE / journal.stem


def server_log(log_dir: Path, server: str) -> Path:
    """The file in ``log_dir`` (a run's ``tool_servers/``) that keeps what tool server
    ``server`` wrote on stderr."""
    return log_dir / f"{server}{SERVER_LOG_SUFFIX}"


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory (they need not exist)."""

    root: Path

    @property
    def lock(self) -> Path:
        return self.root / LOCK

    @property
    def shared_check(self) -> Path:
        return self.root / SHARED_CHECK

    def shared_check_reply(self, worker: str) -> Path:
        """The file worker ``worker`` writes beside the driver's token to show it can."""
        return self.root / f"{SHARED_CHECK}.{_UNSAFE.sub('_', worker)}"

    @property
    def hydra(self) -> Path:
        return self.root / HYDRA

    @property
    def hydra_config(self) -> Path:
        return self.hydra / HYDRA_CONFIG

    @property
    def hydra_settings(self) -> Path:
        return self.hydra / HYDRA_SETTINGS

    @property
    def hydra_overrides(self) -> Path:
        return self.hydra / HYDRA_OVERRIDES

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def results(self) -> Path:
        return self.root / RESULTS

    @property
    def summary(self) -> Path:
        return self.root / SUMMARY

    @property
    def superseded_results(self) -> Path:
        """Where the result lines of tasks whose inputs changed go (``superseded_dir``)."""
        return self.root / SUPERSEDED / RESULTS

    @property
    def tasks(self) -> Path:
        return self.root / TASKS

    @property
    def tool_server_logs(self) -> Path:
        return self.root / TOOL_SERVER_LOGS

    @property
    def replay(self) -> Path:
        return self.root / REPLAY

    def judging(self, name: str) -> Path:
        """The folder of the judging ``name`` (``deepledger judge --name``)."""
        return self.root / JUDGINGS / _UNSAFE.sub("_", name)

    @property
    def report(self) -> Path:
        return self.root / REPORT

    @property
    def run_journal(self) -> Path:
        return self.root / RUN_JOURNAL

    def task_dir(self, task_id: str) -> Path:
        return self.tasks / safe_name(task_id)

    def superseded_dir(self, task_id: str, stamp: str) -> Path:
        """Where a task's folder goes when its inputs changed: outside ``tasks/``, which
        the report, the replay and the token economics read."""
        return self.root / SUPERSEDED / f"{safe_name(task_id)}.{stamp}"

    def progress(self, task_id: str) -> Path:
        return self.task_dir(task_id) / PROGRESS

    def journal(self, task_id: str, attempt: int, retry: int) -> Path:
        return self.task_dir(task_id) / journal_name(attempt, retry)

    def task_dirs(self) -> dict[str, Path]:
        """The task folders there are, by folder name, in name order."""
        if not self.tasks.is_dir():
            return {}
        return {p.name: p for p in sorted(self.tasks.iterdir()) if p.is_dir()}

    def jsonl_files(self) -> list[Path]:
        """The results and every progress and journal file of the run."""
        return [self.results, *self.tasks.rglob(f"*{JOURNAL_SUFFIX}")]

    def attempt_journals(self) -> list[Path]:
        """Every task's attempt journals in use (not the copies killed runs left)."""
        return sorted(
            path
            for path in self.root.glob(ATTEMPT_JOURNALS)
            if (name := parse_journal_name(path.name)) is not None and name.interrupted is None
        )
