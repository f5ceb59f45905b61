"""The run directory: what a benchmark run leaves behind, and how it is resumed.

::

    RUN_DIR/                       (= hydra.run.dir)
      .lock                        held by the process running in the folder
      .hydra/                      Hydra's config.yaml, hydra.yaml, overrides.yaml (redacted),
                                   written once the lock is held (hydra.output_subdir is off)
      manifest.json                redacted config, versions, git commit, start/end times;
                                   each run's config_id
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

One process at a time: the folder is checked and its lock taken (``claim``) before
anything is written into it, by the Hydra callback in ``bench/hydra_hooks.py`` even
before Hydra itself would write there. A folder that is a file, read-only, on a full
disk or held by a live run is refused with a :class:`RunDirectoryError` naming it. A
disk that fills while the run goes stops the run with the same error: what was recorded
stays valid, and the same command resumes once there is space.

A resume whose settings differ from the last run's (``resume_changes``) is refused
unless ``resume.allow_config_change=true``; harmless keys (``RESUME_HARMLESS``:
concurrency, reporting, run budgets, timeouts, where the server is) never count. Each
run's settings have a ``config_id`` (a hash of the keys that count), stamped on every
result and progress line, so a summary over several says so (``config_breakdown``). A
change of judge is refused even when allowed: one accuracy never mixes two judges.
"""

from __future__ import annotations

import errno
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
from deepledger.errors import DeepLedgerError, RunDirectoryError
from deepledger.store.journal import DISK_FULL, Journal, append_whole, disk_trouble

RESULTS = "benchmark_results.jsonl"
SUMMARY = "summary.json"
MANIFEST = "manifest.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password)$", re.IGNORECASE)
# ``key=value`` inside a longer text (Hydra's ``override_dirname`` joins overrides with
# commas): the value runs to the next comma or space.
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<key>[\w.@/+~-]*?(?:api[_-]?key|token|secret|password))=(?P<value>[^,\s]+)",
    re.IGNORECASE,
)
_VERSIONED = ("openai", "anthropic", "mcp", "hydra-core", "omegaconf", "tiktoken")
LOCK = ".lock"
# Below this much free space a run is refused before it starts: a task's journals and
# results need a few hundred kilobytes, and a disk this full fills up mid-run.
MIN_FREE_BYTES = 1 << 20
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


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
    The file is private to its owner unless ``mode`` says otherwise. A full disk leaves
    the old file as it was and raises :class:`RunDirectoryError`."""
    try:
        handle, temporary = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
        )
        try:
            with os.fdopen(handle, "w", encoding="utf-8", errors="backslashreplace") as out:
                out.write(text)
            if mode is not None:
                os.chmod(temporary, mode)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as exc:
        if (trouble := disk_trouble(path, exc)) is not None:
            raise trouble from exc
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


# Run directories whose lock this process took before Hydra started the job (the
# callback in bench/hydra_hooks.py); RunStore adopts the lock from here.
_claimed: dict[Path, Any] = {}


def claim(root: Path, key: str = "hydra.run.dir") -> None:
    """Check that ``root`` can hold a run and take its lock, for this process to keep
    until ``release``; a :class:`RunDirectoryError` naming ``key`` and what to do
    otherwise. A folder refused because a live run holds it is left exactly as it was
    (a new one refused for a full disk may be left holding an empty lock file)."""
    root = Path(os.path.abspath(root))
    if root not in _claimed:
        _claimed[root] = _take_lock(root, key)


def release(root: Path) -> None:
    """Give back a lock ``claim`` took and no RunStore adopted."""
    handle = _claimed.pop(Path(os.path.abspath(root)), None)
    if handle is not None:
        handle.close()  # closing the file releases its lock


def _take_lock(root: Path, key: str) -> Any:
    _refuse_a_file(root, key)
    try:
        root.mkdir(parents=True, exist_ok=True)
        # Not "w": opening a live run's lock must not truncate it (a write to its folder).
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        handle = os.fdopen(os.open(root / LOCK, flags, 0o644), "rb+")
    except OSError as exc:
        raise _unusable(root, key, exc) from exc
    if not _lock_soon(handle):
        handle.close()
        raise RunDirectoryError(
            f"Another deepledger process is running in {root}. Wait for it to finish, or "
            f"choose another {key}=...; nothing in the folder was changed."
        )
    try:
        _check_writable(root, key)
    except BaseException:
        handle.close()
        raise
    return handle


def check_folder(root: Path, key: str) -> None:
    """What ``claim`` checks, without the lock: for a sweep's folder, which holds runs."""
    _refuse_a_file(root, key)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unusable(root, key, exc) from exc
    _check_writable(root, key)


def _refuse_a_file(root: Path, key: str) -> None:
    if root.exists() and not root.is_dir():
        raise RunDirectoryError(
            f"{key}={root} is a file, not a folder. Choose another {key}=..., or move the "
            "file away."
        )


def _check_writable(root: Path, key: str) -> None:
    """Refuse a folder this process cannot write and a disk too full for a run, without
    writing anything: ``access`` tells a read-only mount or an immutable folder even to
    root, whose writes pass permission bits."""
    if not os.access(root, os.W_OK | os.X_OK):
        raise RunDirectoryError(
            f"The run directory {key}={root} is read-only, and deepledger writes its results "
            f"there. Choose a folder you can write ({key}=...), or make this one writable."
        )
    try:
        stats = os.statvfs(root)
    except OSError as exc:
        raise _unusable(root, key, exc) from exc
    free = stats.f_bavail * stats.f_frsize
    if free < MIN_FREE_BYTES:
        raise RunDirectoryError(
            f"The disk holding {key}={root} is full ({free // 1024} KiB free). Free some "
            "space or choose another folder; a resume keeps the tasks already recorded."
        )


def _unusable(root: Path, key: str, exc: OSError) -> RunDirectoryError:
    reason = exc.strerror or str(exc)
    if exc.errno in DISK_FULL:
        advice = "the disk is full: free some space or choose another folder"
    elif exc.errno in _READ_ONLY:
        advice = "it is read-only: choose a folder you can write"
    elif exc.errno in (errno.ENOTDIR, errno.EEXIST):
        advice = "a part of the path is a file: choose another folder"
    else:
        advice = "choose another folder"
    return RunDirectoryError(
        f"Cannot write to the run directory {key}={root} ({reason}); {advice} ({key}=...)."
    )


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
    line unfinished, start on a new line so the new record is not glued to it. A write
    the disk cannot take whole is undone (the file cut back to where it was: that frees
    space, so it works on a full disk) and raises :class:`RunDirectoryError`."""
    line = json.dumps(record, ensure_ascii=False) + "\n"
    try:
        if _ends_mid_line(path):
            line = "\n" + line
        data = line.encode("utf-8", errors="backslashreplace")
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            append_whole(handle, data, sync=True)
        finally:
            os.close(handle)
    except OSError as exc:
        if (trouble := disk_trouble(path, exc)) is not None:
            raise trouble from exc
        raise


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


class RunStore:
    """One run directory, held exclusively while open: two processes appending to the
    same results would record tasks twice."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._results_lock = threading.Lock()  # results lines come from worker threads
        self._task_dirs: set[Path] = set()  # made already
        self.config_id: str | None = None  # of this run's settings, once started
        claim(root)
        self._lock = _claimed.pop(Path(os.path.abspath(root)))  # ours now: closed by close()
        try:
            (root / "tasks").mkdir(exist_ok=True)
        except OSError as exc:
            self.close()
            raise _unusable(root, "hydra.run.dir", exc) from exc

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
    def _manifest(self) -> dict[str, Any] | None:
        path = self.root / MANIFEST
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def check_resume(self, config: dict[str, Any], allow_change: bool) -> list[str]:
        """Refuse (:class:`RunDirectoryError`, nothing written) a resume whose settings
        differ from the last run's in keys that count, unless ``allow_change``; refuse a
        change of judge once a task was judged, allowed or not. Return the counted
        differences a permitted resume goes on with."""
        manifest = self._manifest()
        if manifest is None:
            return []
        last = manifest["runs"][-1]["config"] if manifest["runs"] else manifest["config"]
        counted, judge = resume_changes(last, redact(config))
        if judge and any(r.get("judgement") for r in self.latest_results().values()):
            raise RunDirectoryError(
                f"{self.root} holds tasks judged with other settings:\n  "
                + "\n  ".join(judge)
                + "\nOne accuracy never mixes two judges, not even with "
                "resume.allow_config_change=true. Choose a new hydra.run.dir=... for this "
                "judge; `deepledger report OLD_DIR NEW_DIR` compares the two runs."
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

    def start(self, config: dict[str, Any], argv: list[str], tasks: int) -> list[str]:
        """Record this run in the manifest; return how its config differs from the last
        run's. The first run's config stays at the top; each run keeps its own, and its
        ``config_id``, which every result and progress line of this run carries."""
        path = self.root / MANIFEST
        redacted = redact(config)
        self.config_id = config_id(redacted)
        manifest = self._manifest()
        if manifest is None:
            manifest = {"created_at": now(), "config": redacted, "runs": []}
        last = manifest["runs"][-1]["config"] if manifest["runs"] else manifest["config"]
        manifest["tasks_expected"] = tasks
        manifest["runs"].append(
            {
                "started_at": now(),
                "finished_at": None,
                "argv": redact(argv),
                "config": redacted,
                "config_id": self.config_id,
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
            append_line(self.results_path, self._stamped(record))

    def _stamped(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` with the config_id of this run on the task and on every attempt and
        retry done now (those resumed from an earlier run keep theirs)."""
        if self.config_id is None:
            return record
        attempts = [
            {
                **attempt,
                "config_id": attempt.get("config_id", self.config_id),
                "retries": [
                    {**r, "config_id": r.get("config_id", self.config_id)}
                    for r in attempt.get("retries") or []
                ],
            }
            for attempt in record.get("attempts") or []
        ]
        return {**record, "config_id": self.config_id, "attempts": attempts}

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write ``summary``, adding to it (in place) how many tasks ran under each of
        the run's settings when a permitted resume changed them."""
        if breakdown := config_breakdown(self.root):
            summary["configs"] = breakdown
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
        stamp = {"config_id": self.config_id} if self.config_id else {}
        append_line(
            self.task_dir(task_id) / "progress.jsonl",
            {"ts": now(), "event": event, **stamp, **data},
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
            from deepledger.tools.memory import memory_folder

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
    """The config without secrets: values of keys named like api_key/token/secret, and
    the value in any ``key=value`` text whose key is named so (the overrides Hydra
    records, the command line)."""
    if isinstance(value, dict):
        return {
            k: "***" if _SECRET_KEY.search(str(k)) and isinstance(v, str) and v else redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_assignments(value)
    return value


def redact_assignments(text: str) -> str:
    """``text`` with the value of each secret-looking ``key=value`` replaced by ``***``.

    A whole override (``+tools.search.env.SERPER_API_KEY='a b'``) loses everything after
    its ``=``, quotes and spaces included; in a longer text a value ends at a comma or a
    space.
    """
    key, equals, value = text.partition("=")
    if equals and value and _SECRET_KEY.search(key.split("@", 1)[0].strip()):
        return f"{key}=***"
    return _SECRET_ASSIGNMENT.sub(lambda m: f"{m['key']}=***", text)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat |= _flatten(item, f"{prefix}{key}.")
        return flat or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): value}


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
    "llm.base_url",
    "llm.api_key",
    "llm.api_key_env",
    "llm.api_key_required",
    "llm.timeout_seconds",
    "llm.connect_timeout_seconds",
    "llm.retry",
    "llm.async_client",
    "pricing",
    "resume",
    "hydra",
    "question",
    "task_file",
)
# Two judges' verdicts never share one accuracy (see RunStore.check_resume).
JUDGE_KEYS = ("benchmark.judge",)


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def _counted(config: dict[str, Any]) -> dict[str, Any]:
    """The flattened settings that count for a resume (None for an absent key: a key a
    newer deepledger added with no value is no change)."""
    return {
        k: v
        for k, v in _flatten(config).items()
        if not _under(k, RESUME_HARMLESS) and v is not None
    }


def config_id(config: dict[str, Any]) -> str:
    """A short name for the settings that decide what a task does and how it is judged:
    a resume that changes only harmless keys keeps it."""
    canonical = json.dumps(_counted(redact(config)), sort_keys=True, default=str)
    return hashlib.sha1(canonical.encode()).hexdigest()[:8]


def resume_changes(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The differences that count (``key: old -> new``), and of those the judge's."""
    old, new = _counted(before), _counted(after)
    counted = [
        f"{key}: {old.get(key, '(absent)')!r} -> {new.get(key, '(absent)')!r}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    ]
    return counted, [c for c in counted if _under(c.split(":", 1)[0], JUDGE_KEYS)]


def config_breakdown(root: Path) -> dict[str, Any] | None:
    """How many tasks finished under each config_id, when the results hold more than
    one (None otherwise), with the runs that used it and the tasks whose retries ran
    under several."""
    manifest_path = root / MANIFEST
    try:
        runs = json.loads(manifest_path.read_text(encoding="utf-8")).get("runs") or []
    except (OSError, json.JSONDecodeError):
        runs = []
    records = list(latest_records(read_jsonl(root / RESULTS)).values())
    ids = [r.get("config_id") for r in records if r.get("config_id")]
    if len(set(ids)) < 2:
        return None
    mixed = [
        r["task_id"]
        for r in records
        if len(
            {x.get("config_id") for a in r.get("attempts") or [] for x in a.get("retries") or []}
            - {None}
        )
        > 1
    ]
    return {
        "ids": {
            cid: {
                "tasks": ids.count(cid),
                "runs": [n for n, run in enumerate(runs, 1) if run.get("config_id") == cid],
            }
            for cid in dict.fromkeys(ids)
        },
        "mixed_tasks": mixed,
    }


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
