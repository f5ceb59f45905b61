"""The run directory: what a benchmark run leaves behind, and how it is resumed.

::

    RUN_DIR/                       (= hydra.run.dir)
      manifest.json                redacted config, versions, git commit, start/end times
      benchmark_results.jsonl      one line per finished task (appended, one write each)
      summary.json                 the run's metrics (replaced atomically)
      tasks/<safe id>/
        progress.jsonl             the task's own journal: each finished retry and attempt
        attempt-A-retry-R.jsonl    the agent's journal of one run of the loop
        attempt-A-retry-R.subagents/  sub-agent journals
        memory/attempt-A/          the memory tool's notes, shared by the attempt's retries
      tool_servers/*.stderr.log    what the tool servers wrote on stderr
      replay.json                  what `deepledger replay` computed last
      report.html                  the run in a browser (`deepledger report` rebuilds it)

Resume: the same command with the same run directory. Tasks whose newest line in
``benchmark_results.jsonl`` says ``finished`` are done and are not run or judged again
(a task that ended in an error is run again; its new line supersedes the old). For the
others,
``progress.jsonl`` says which attempts and format-retries finished (with their
post-mortems, which the next retry carries); an unfinished retry is run again from its
start, and its partial journal is kept beside the new one, renamed ``.interrupted``.

Every file is appended to or replaced whole (temp file + rename): a run killed at any
moment leaves readable files. A line cut short by a crash is ignored when reading.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from deepledger import __version__
from deepledger.errors import ConfigError, DeepLedgerError
from deepledger.journal import Journal
from deepledger.tools.memory import memory_folder

RESULTS = "benchmark_results.jsonl"
SUMMARY = "summary.json"
MANIFEST = "manifest.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SECRET_KEY = re.compile(r"(api_?key|token|secret|password)$", re.IGNORECASE)
_VERSIONED = ("openai", "anthropic", "mcp", "hydra-core", "omegaconf", "tiktoken")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def safe_name(task_id: str) -> str:
    """A folder name for any task id: readable, and unique through a hash suffix."""
    readable = _UNSAFE.sub("_", task_id).strip("._")[:60] or "task"
    return f"{readable}-{hashlib.sha1(task_id.encode()).hexdigest()[:10]}"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of ``path`` (a line cut short by a crash is skipped)."""
    if not path.exists():
        return []
    records = []
    # errors="replace": a read that lands mid-append may cut a character in two; that
    # last line is no JSON anyway.
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_text_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Replace ``path`` whole: readers see the old file or the new one, never a part.
    The file is private to its owner unless ``mode`` says otherwise."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", errors="backslashreplace") as out:
            out.write(text)
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_manifest(root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run directory's manifest and the config of its newest run; a clear error for
    a folder that is not a run directory or whose manifest cannot be read."""
    path = root / MANIFEST
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


def _lock_soon(handle: Any, tries: int = 25, pause: float = 0.02) -> bool:
    """Take the run directory's lock. A few tries: ``run_is_live`` (a report being
    built) holds it for microseconds; a running bench holds it for good."""
    for attempt in range(tries):
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < tries:
                time.sleep(pause)
    return False


def run_is_live(root: Path) -> bool:
    """Whether a deepledger process holds ``root`` now (a run still going), found
    without waiting: a killed run's lock went with its process."""
    try:
        with (root / ".lock").open("rb") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:  # no lock file: never run, or not a run directory
        return False
    return False


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line in a single write, flushed to disk. If a crash left the last
    line unfinished, start on a new line so the new record is not glued to it."""
    line = json.dumps(record, ensure_ascii=False) + "\n"
    if _ends_mid_line(path):
        line = "\n" + line
    with path.open("a", encoding="utf-8", errors="backslashreplace") as out:
        out.write(line)
        out.flush()
        os.fsync(out.fileno())


def _ends_mid_line(path: Path) -> bool:
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open("rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


@dataclass
class TaskProgress:
    """What earlier runs finished of one task."""

    attempts: list[dict[str, Any]] = field(default_factory=list)  # finished attempts
    retries: list[dict[str, Any]] = field(default_factory=list)  # of the unfinished attempt


class RunDirectory:
    """One run directory, held exclusively while open: two processes appending to the
    same results would record tasks twice."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._results_lock = threading.Lock()  # results lines come from worker threads
        self._task_dirs: set[Path] = set()  # made already
        try:
            (root / "tasks").mkdir(parents=True, exist_ok=True)
            self._lock = (root / ".lock").open("w")
        except OSError as exc:
            raise ConfigError(
                f"Cannot write to the run directory {root} ({exc.strerror}). Choose another "
                "with hydra.run.dir=..."
            ) from exc
        if not _lock_soon(self._lock):
            self._lock.close()
            raise ConfigError(
                f"Another deepledger process is running in {root}. Wait for it to finish, or "
                "choose another hydra.run.dir."
            ) from None

    def close(self) -> None:
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    @property
    def results_path(self) -> Path:
        return self.root / RESULTS

    def task_dir(self, task_id: str) -> Path:
        path = self.root / "tasks" / safe_name(task_id)
        if path not in self._task_dirs:  # each mkdir is a system call; tasks ask often
            path.mkdir(parents=True, exist_ok=True)
            self._task_dirs.add(path)
        return path

    # -- manifest ---------------------------------------------------------------------
    def start(self, config: dict[str, Any], argv: list[str], tasks: int) -> list[str]:
        """Record this run in the manifest; return how its config differs from the last
        run's. The first run's config stays at the top; each run keeps its own."""
        path = self.root / MANIFEST
        redacted = redact(config)
        manifest = json.loads(path.read_text()) if path.exists() else None
        if manifest is None:
            manifest = {"created_at": now(), "config": redacted, "runs": []}
        last = manifest["runs"][-1]["config"] if manifest["runs"] else manifest["config"]
        manifest["tasks_expected"] = tasks
        manifest["runs"].append(
            {
                "started_at": now(),
                "finished_at": None,
                "argv": argv,
                "config": redacted,
                "versions": versions(),
                "git_commit": git_commit(),
            }
        )
        write_json_atomic(path, manifest)
        return config_differences(last, redacted) if len(manifest["runs"]) > 1 else []

    def finish(self) -> None:
        """Note the end of this run in the manifest."""
        path = self.root / MANIFEST
        manifest = json.loads(path.read_text())
        manifest["runs"][-1]["finished_at"] = now()
        write_json_atomic(path, manifest)

    # -- results ----------------------------------------------------------------------
    def latest_results(self) -> dict[str, dict[str, Any]]:
        """Each task's newest line (a task that errored is run again on resume, and its
        new line supersedes the old one)."""
        return latest_records(read_jsonl(self.results_path))

    def finished_results(self) -> dict[str, dict[str, Any]]:
        """The tasks that are done: a resume does not run or judge them again."""
        return {k: r for k, r in self.latest_results().items() if r.get("status") == "finished"}

    def add_result(self, record: dict[str, Any]) -> None:
        """Append one task's record. Safe to call from worker threads: the runner does,
        so that the flush to disk does not hold up every other task."""
        with self._results_lock:
            append_line(self.results_path, record)

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json_atomic(self.root / SUMMARY, summary)

    # -- per-task progress and journals -----------------------------------------------
    def progress(self, task_id: str) -> TaskProgress:
        done = TaskProgress()
        for event in read_jsonl(self.task_dir(task_id) / "progress.jsonl"):
            if event.get("event") == "attempt_finished":
                done.attempts.append(event)
                done.retries = []
            elif event.get("event") == "retry_finished":
                done.retries.append(event)
        return done

    def record_progress(self, task_id: str, event: str, **data: Any) -> None:
        append_line(
            self.task_dir(task_id) / "progress.jsonl", {"ts": now(), "event": event, **data}
        )

    def journal(self, task_id: str, attempt: int, retry: int) -> Journal:
        path = self.task_dir(task_id) / f"attempt-{attempt}-retry-{retry}.jsonl"
        if path.exists():  # left by a run that was killed: keep it, start afresh
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
            path.rename(path.with_suffix(f".interrupted-{stamp}.jsonl"))
            subagents = path.with_suffix(".subagents")
            if subagents.exists():
                subagents.rename(path.with_suffix(f".interrupted-{stamp}.subagents"))
            # The attempt starts afresh, so do its memory notes (tools/memory.py).
            memory = memory_folder(path)
            if retry == 0 and memory is not None and memory.exists():
                memory.rename(memory.with_name(f"{memory.name}.interrupted-{stamp}"))
        return Journal(path)

    def interrupted_usages(self, task_id: str) -> list[dict[str, int]]:
        """The usage of every model call recorded in journals a killed run left behind:
        those tokens were spent (and billed) even though the retry is being redone."""
        usages = []
        for journal in sorted(self.task_dir(task_id).glob("*.interrupted-*.jsonl")):
            usages += [
                event["usage"]
                for event in read_jsonl(journal)
                if event.get("event") in ("llm_call", "closing_call") and "usage" in event
            ]
        return usages

    def relative(self, path: Path | None) -> str | None:
        return str(path.relative_to(self.root)) if path else None


def latest_records(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last record of each task id, in first-seen order."""
    latest: dict[str, dict[str, Any]] = {}
    for record in records:
        if "task_id" in record:
            latest[record["task_id"]] = record
    return latest


def redact(value: Any) -> Any:
    """The config without secrets (values of keys named like api_key/token/secret)."""
    if isinstance(value, dict):
        return {
            k: "***" if _SECRET_KEY.search(str(k)) and isinstance(v, str) and v else redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat |= _flatten(item, f"{prefix}{key}.")
        return flat or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): value}


def config_differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    old, new = _flatten(before), _flatten(after)
    return [
        f"{key}: {old.get(key, '(absent)')!r} -> {new.get(key, '(absent)')!r}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key, "(absent)") != new.get(key, "(absent)")
    ]


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
