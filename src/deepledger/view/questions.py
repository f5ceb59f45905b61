"""Questions asked from the viewer: each a ``deepledger run`` in a process of its own,
its folder under the logs folder, its journal read by the viewer as it grows.

Starting processes from a web form is a door into the machine, so the viewer does it
only when bound to a loopback address (or told so, ``--allow-questions``), only for a
JSON request from its own origin (a page elsewhere cannot post one without the
browser asking first, which the viewer never allows), and with the question as text:
a question starting with ``@`` is never read as a file name.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from deepledger.errors import ConfigError
from deepledger.store.redaction import redact_assignments

# Where the viewer's questions go below the logs folder, one folder each.
QUESTIONS = "questions"
# How much of a failed run's stderr the page shows.
STDERR_SHOWN = 4_000
# The same question text `deepledger run` reads as a file name when it starts with this
# (cli/run_args.py); doubled, it is the character itself.
FILE_PREFIX = "@"
# How long a question's run has to stop on SIGINT when the viewer ends, before SIGKILL.
STOP_GRACE_SECONDS = 10.0


@dataclass
class Question:
    """A question the viewer started: its folder and its process."""

    run_dir: Path
    process: subprocess.Popen[bytes]
    stderr: IO[bytes]

    def failure(self) -> str | None:
        """What the process wrote on stderr, once it has ended without success."""
        code = self.process.poll()
        if code is None or code == 0:
            return None
        self.stderr.seek(0)
        said = self.stderr.read().decode("utf-8", errors="replace").strip()
        # An error may quote the overrides, an api key typed into the form among them.
        said = redact_assignments(said[-STDERR_SHOWN:])
        return f"deepledger run ended with exit code {code}: {said}"


def command(question: str, overrides: str, run_dir: Path) -> list[str]:
    """The ``deepledger run`` command line of a question asked from the viewer."""
    text = question.strip()
    if not text:
        raise ConfigError("The question is empty: write the question to ask.")
    if text.startswith(FILE_PREFIX):  # text from the form, never a file's name
        text = FILE_PREFIX + text
    try:
        extra = shlex.split(overrides)
    except ValueError as exc:
        raise ConfigError(
            f"The overrides could not be read ({exc}): quote them as in a shell."
        ) from exc
    for word in extra:
        if word.startswith("-") or _form_owned(word):
            raise ConfigError(
                f"{word!r} is not an override the viewer passes on: give key=value "
                "overrides of the run's settings (the question and its folder are the form's)."
            )
    return [
        sys.executable,
        "-m",
        "deepledger",
        "run",
        f"question={text}",
        *extra,
        f"hydra.run.dir={run_dir}",
    ]


def _form_owned(word: str) -> bool:
    """Whether override ``word`` sets what the form owns: the question (``question=``,
    ``++question=``...) or anything of Hydra's (``hydra.run.dir``, ``hydra.callbacks``,
    the ``hydra/launcher`` group...), which could move the run's folder out of the logs
    folder or have Hydra import and call code named in the form."""
    key = word.split("=", 1)[0].lstrip("+~").split("@", 1)[0].strip()
    return key == "question" or key == "hydra" or key.startswith(("hydra.", "hydra/"))


def stop_all(asked: Iterable[Question], grace: float = STOP_GRACE_SECONDS) -> None:
    """End the questions' processes still running, as Ctrl-C would (SIGINT, then
    SIGKILL after ``grace``), and reap every one: none outlives the viewer."""
    every = list(asked)
    running = [q for q in every if q.process.poll() is None]
    for question in running:
        with contextlib.suppress(ProcessLookupError):
            question.process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace
    for question in running:
        try:
            question.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            question.process.kill()
            question.process.wait()
    for question in every:
        question.process.poll()
        question.stderr.close()


def new_folder(logs: Path) -> Path:
    """A folder for the next question: ``questions/<UTC stamp>`` (``-2``... if taken)."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d_%H-%M-%S")
    base = logs / QUESTIONS / stamp
    folder, number = base, 1
    while folder.exists():
        number += 1
        folder = base.with_name(f"{stamp}-{number}")
    return folder


def start(logs: Path, question: str, overrides: str) -> Question:
    """Start ``deepledger run`` on ``question`` in a new folder under ``logs``."""
    run_dir = new_folder(logs)
    argv = command(question, overrides, run_dir)
    # Its stderr is kept apart from the run folder, which its own process claims first.
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 - kept open as long as the process
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
    )
    return Question(run_dir, process, stderr)
