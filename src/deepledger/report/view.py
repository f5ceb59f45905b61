"""The shapes of the data a report page hands to its viewer (``assets/report.js``).

The page embeds two kinds of JSON: a payload read at once (the run's facts, a row per
task, the chart datasets; or, for several runs, a comparison) and, per task, a packed
detail opened on demand (its journals, model calls and marks). Each shape is a
``TypedDict``: the page's JSON is exactly these dicts, so ``report.js`` reads the keys
written here. Journal events inside a trajectory are their journal lines as read
(``records.codec``), clipped for the page: JSON, typed by the records themselves.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from deepledger.messages import JSONObject

RunState = Literal["finished", "running", "stopped"]


class RunFacts(TypedDict):
    """The run as a whole: where, when, with what settings, and its summary."""

    dir: str
    kind: Literal["bench", "run"]  # a `deepledger bench` run, or a `deepledger run` folder
    benchmark: str
    generated_at: str
    deepledger_version: str
    recorded_version: str | None
    state: RunState
    started_at: str | None
    finished_at: str | None
    sessions: int
    wall_seconds: float | None
    config: JSONObject  # config_highlights: a setting's name -> its value as recorded
    overrides: list[str]
    summary: JSONObject  # summary.json's content
    missing: list[str]  # journals or tasks that could not be shown, and why
    tasks_shown: int
    tasks_not_started: int


class TaskRow(TypedDict):
    """A row of the task table: a judged task's record, or an unfinished task's
    figures so far (which has no extraction figures)."""

    id: str
    question: str
    ground_truth: str | None
    answer: str | None
    status: str  # correct / wrong / unjudged / no-verdict / unknown, error, or unfinished
    judgement: str
    judge: str | None
    attempts: int
    first_attempt: str | None
    post_mortems: int
    turns: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int | None
    extraction_input_tokens: NotRequired[int]
    extraction_output_tokens: NotRequired[int]
    cost: float | None
    end_reason: str | None
    provenance: str | None
    seconds: float | None
    dir: str | None  # the task's folder, relative to the run directory
    worker_lost: int  # backend=ray: how often the worker running it died under it


class JournalView(TypedDict):
    """One journal of a task's trajectory: an attempt's retry or a sub-agent's run."""

    label: str
    attempt: int
    retry: int
    subagent: bool
    journal: str  # relative to the run directory
    carried_post_mortems: int | None
    events: list[JSONObject]  # the journal's lines, clipped (collect.compact_event)


class CallPoint(TypedDict):
    """A model call: ``kind`` is loop, a closing call's purpose, reply_cut, subagent or
    interrupted."""

    task: int  # the task's index in the table
    run: str  # the journal's label
    turn: int | None
    kind: str
    ts: str
    input: int
    cache_read: int
    output: int


class MarkPoint(TypedDict):
    """Where the window guard, a compaction or the loop check acted, at a prompt size."""

    task: int
    run: str
    turn: int
    kind: str
    input: int


class LabelledMark(MarkPoint):
    label: str  # the task's id and the journal's label


class LinePoint(TypedDict):
    """A point of a task's prompt-tokens line in the run's chart."""

    key: str
    label: str
    turn: int | None
    input: int


class WindowRule(TypedDict):
    tokens: int
    label: str


class CumulativePoint(TypedDict):
    call: int
    series: str
    tokens: int


class TurnsPoint(TypedDict):
    turns: int


class RunDatasets(TypedDict):
    calls: list[LinePoint]
    marks: list[LabelledMark]
    window: list[WindowRule]
    cumulative: list[CumulativePoint]
    turns: list[TurnsPoint]


class TextLimits(TypedDict):
    text: int
    result: int
    field: int


class RunPayload(TypedDict):
    """What a run's page reads at once."""

    kind: Literal["run"]
    run: RunFacts
    tasks: list[TaskRow]
    charts: dict[str, JSONObject]  # Vega-Lite specs by name
    datasets: RunDatasets
    limits: TextLimits
    lines_drawn: int


class TaskDetail(TypedDict):
    """What a run's page unpacks when the reader opens a task."""

    journals: list[JournalView]
    calls: list[CallPoint]
    marks: list[LabelledMark]


class RunFigures(TypedDict):
    """A readable run's figures in a comparison."""

    state: Literal["finished", "unfinished"]
    finished: int
    expected: int | None
    accuracy: float | None
    pass_at_k: float | None
    input_tokens: int
    cache_read_tokens: int
    output_tokens: int
    cost: float | None
    turns_mean: float | None
    wall_seconds: float | None
    report: str | None  # its report.html, relative to the comparison's file


class RunLabel(TypedDict):
    dir: str
    label: str  # the settings in which it differs from the others, else its folder


class ComparedRun(RunLabel, RunFigures):
    """A run of a comparison that could be read."""


class UnreadRun(RunLabel):
    """A folder of a comparison that is no readable run, and why."""

    problem: str


class TaskAcrossRuns(TypedDict):
    """A task's status in each compared run (None: not in that run)."""

    id: str
    question: str
    cells: list[str | None]
    differs: bool


class ComparisonPayload(TypedDict):
    kind: Literal["comparison"]
    generated_at: str
    deepledger_version: str
    runs: list[ComparedRun | UnreadRun]
    tasks: list[TaskAcrossRuns]
    charts: dict[str, JSONObject]
