"""Why a run stops, in words: a rejecting endpoint, a refusing disk, a spent budget.

For an endpoint, which model, URL and key variable to check.

Each stops the whole suite at its first occurrence, since every other task would meet
it too; the message says what to fix and that the run resumes in its folder (the
command that resumes it: ``cli/resuming.py``).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepledger.agent.limits import LimitHit
from deepledger.bench.judge import Judge
from deepledger.bench.metrics import plural
from deepledger.config import COMMAND_LINE_KEY_ENV, Config, LLMConfig, extract_llm_name
from deepledger.context.compaction import NoteWriter
from deepledger.errors import (
    EndpointRejectedError,
    EndpointUnreachableError,
    RunDirectoryError,
    RunRejectedError,
)
from deepledger.llm.base import LLMClient
from deepledger.store.files import disk_trouble
from deepledger.tools.scrape import PageScraper


class JudgeRejectedError(EndpointRejectedError):
    """The judge's endpoint, not the agent's, rejected the run."""


@dataclass
class RunStops:
    """Words for what stops a run, from the models and the run directory it uses (a
    Ray driver has no models: its workers describe a rejection, :meth:`mark`)."""

    cfg: Config
    root: Path
    llm: LLMClient | None = None
    judge: Judge | None = None
    note_writer: NoteWriter | None = None
    scraper: PageScraper | None = None

    def refused_write(self, exc: BaseException) -> RunDirectoryError | None:
        """The run-stopping error when ``exc`` (or what it wraps) is a write the disk
        refused: full or read-only. Journals write through plain files, so their
        OSError comes unconverted."""
        for cause in causes(exc):
            if isinstance(cause, RunDirectoryError):
                return cause
            if isinstance(cause, OSError):
                where = cause.filename or self.root
                if (trouble := disk_trouble(Path(where), cause)) is not None:
                    return trouble
        return None

    def rejected(self, exc: EndpointRejectedError, not_done: int) -> RunRejectedError:
        """The one message of a suite stopped by an endpoint that rejects it (described
        by the worker that met it, with the backend=ray: :meth:`mark`)."""
        whose = exc.whose or self.whose(exc)
        said = exc.said or str(exc.__cause__ or exc)  # key blanked
        if any(isinstance(cause, EndpointUnreachableError) for cause in causes(exc)):
            return _unreachable(whose, said, not_done, self.root)
        status = f"HTTP {exc.status}" if exc.status else "a rejection"
        return RunRejectedError(
            f"the model endpoint answered {status}, refusing the key or the model, for "
            f"{whose}. The suite stopped at this first such answer: {plural(not_done, 'task')} "
            f"{'is' if not_done == 1 else 'are'} not done and none of them was recorded. Fix "
            "the key, the model name or the URL, then resume the run in its folder "
            f"(deepledger resume {shlex.quote(str(self.root))}).\n"
            f"  The server said: {said}"
        )

    def mark(self, exc: EndpointRejectedError) -> EndpointRejectedError:
        """``exc`` carrying its description, for a driver that has not these models."""
        exc.whose = self.whose(exc)
        exc.said = str(exc.__cause__ or exc)
        return exc

    def whose(self, exc: EndpointRejectedError) -> str:
        """Which model, URL and key source rejected the run, without the key."""
        if (key := getattr(exc, "config_key", None)) is not None:
            whose = self._other_model(key, exc)
        elif isinstance(exc, JudgeRejectedError) and self.judge is not None:
            llm = getattr(self.judge, "llm", None)
            preset = self.cfg.benchmark.judge.llm
            whose = (
                f"the judge's model, benchmark.judge.llm={preset} (model "
                f"{getattr(llm, 'model', '?')!r} at {_refused_url(exc) or _base_url(llm)!r}; "
                "its API key from the variable named by llm.api_key_env in that preset)"
            )
        else:
            llm_cfg = self.cfg.llm
            whose = (
                f"llm.model_name={llm_cfg.model_name!r} at {self._agent_url(exc)}, "
                f"{_key_source(llm_cfg)}"
            )
        return whose

    def _agent_url(self, exc: EndpointRejectedError) -> str:
        """``llm.endpoints[i]=URL`` of the server that refused, else ``llm.base_url=URL``."""
        endpoints, refused = self.cfg.llm.endpoints or [], _refused_url(exc)
        if refused is not None and refused in endpoints:
            return f"llm.endpoints[{endpoints.index(refused)}]={refused!r}"
        return f"llm.base_url={self.cfg.llm.base_url or _base_url(self.llm)!r}"

    def _other_model(self, key: str, exc: EndpointRejectedError) -> str:
        """A model of its own preset (``key`` names it), described without its key."""
        if key == "agent.context.summary_llm":
            what, preset = "the compaction notes' model", self.cfg.agent.context.summary_llm
            llm = self.note_writer.llm if self.note_writer is not None else None
        else:
            what, preset = "the page extraction model", extract_llm_name(self.cfg)
            llm = self.scraper.model.llm if self.scraper is not None else None
        return (
            f"{what}, {key}={preset} (model {getattr(llm, 'model', '?')!r} at "
            f"{_refused_url(exc) or _base_url(llm)!r}; its API key from the variable named by "
            "llm.api_key_env in that preset)"
        )


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, the exceptions it was raised from, and those of any group, depth first."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            stack += list(current.exceptions)
        stack += [c for c in (current.__cause__, current.__context__) if c is not None]


def _was(count: int) -> str:
    return "was" if count == 1 else "were"


def say_budget_spent(hit: LimitHit, not_started: int, stopped: int) -> None:
    what = (
        [f"{plural(stopped, 'running task')} {_was(stopped)} stopped unrecorded"] if stopped else []
    )
    what += (
        [f"{plural(not_started, 'task')} {_was(not_started)} not started"] if not_started else []
    )
    print(
        f"deepledger: the run's budget is spent: {hit.describe()}. {'; '.join(what)}; raise "
        "the budget and resume the run in its folder to run them (finished tasks and "
        "retries are kept): the command follows.",
        file=sys.stderr,
    )


def _unreachable(whose: str, said: str, not_done: int, root: Path) -> RunRejectedError:
    """The one message of a suite stopped because its model could not be reached before
    any call of the process that met it reached it (``llm/retry.py``)."""
    return RunRejectedError(
        f"the model endpoint could not be reached, for {whose}, and no call from the "
        "process that met it (with backend=ray: one worker) had reached it. The suite "
        "stopped after the first task's retries: "
        f"{plural(not_done, 'task')} {'is' if not_done == 1 else 'are'} not done and none "
        "of them was recorded. Check the URL (and that its server is running), then resume "
        f"the run in its folder (deepledger resume {shlex.quote(str(root))}).\n"
        f"  {said}"
    )


def _refused_url(exc: EndpointRejectedError) -> str | None:
    """With endpoints: the URL of the server that refused (on ``exc``, or on the error it
    wraps: the notes' and the extraction model's)."""
    cause = exc.__cause__
    return exc.endpoint or (cause.endpoint if isinstance(cause, EndpointRejectedError) else None)


def _base_url(llm: Any) -> str | None:
    inner = getattr(llm, "inner", llm)  # the retrying wrapper holds the provider
    return getattr(inner, "base_url", None)


def _key_source(llm_cfg: LLMConfig) -> str:
    """Where the API key came from, named without the key."""
    from deepledger.llm.factory import DEFAULT_KEY_VARIABLES

    variable = llm_cfg.api_key_env
    if variable == COMMAND_LINE_KEY_ENV:
        return "with the key given as llm.api_key on the command line"
    if variable is None and llm_cfg.api_key_required:
        variable = DEFAULT_KEY_VARIABLES.get(llm_cfg.provider)
    if variable is None:
        return "with no API key (llm.api_key_env is not set; the server may need one)"
    return f"with the API key in ${variable} (llm.api_key_env)"
