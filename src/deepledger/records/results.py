"""The results of a benchmark run, as typed records.

::

    tasks/<id>/progress.jsonl    RetryFinished / AttemptFinished lines, as each ends
    benchmark_results.jsonl      a TaskRecord line per task (finished or errored)
    summary.json                 a SummaryRecord

Every line and the summary carry ``schema_version`` (``records/base.py``); a line or a
summary without one was written before typed records and is read as schema 1. Its
fields then are the same, some of them missing (an errored task's ``end_detail``, the
judge's and the extractor's usage, ``prefix_breaks``): they take the defaults below.

A task that finished and a task that failed are the same class, built by
``TaskRecord.finished`` and ``TaskRecord.failed``: the fields mean the same in both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, Protocol, Self

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator
from pydantic.fields import FieldInfo

from deepledger.messages import JSONObject, Usage
from deepledger.records.base import SCHEMA_VERSION, Record
from deepledger.records.economics import EconomicsUnavailable, TokenEconomics

# A file written before typed records: no schema_version anywhere in it.
FIRST_SCHEMA = 1

TaskStatus = Literal["finished", "error"]


class ResultRecord(Record):
    """A record read back from a run directory: lenient about what older files lack."""

    @classmethod
    def load(cls, data: JSONObject) -> Self:
        """Read a line or file this release or an older one wrote (no version: schema 1).
        Fields a newer release added are accepted, not refused (and not written back)."""
        if "schema_version" in cls.model_fields:
            data = {"schema_version": FIRST_SCHEMA, **data}
        return cls.model_validate(data, extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _nulls_not_recorded(cls, data: Any) -> Any:
        """A null where the field has a value by default (a usage, a count) is a figure
        the writer did not have: the field stays unset, so a reader can tell (a task's
        usage is then its retries', ``bench/metrics.py``)."""
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {
            k: v
            for k, v in data.items()
            if v is not None or k not in fields or _may_be_null(fields[k])
        }

    def to_json(self) -> JSONObject:
        """The record as it goes to disk. A ``config_id`` not stamped is left out, here
        and in the attempts and retries inside: files never held a null one."""
        return _without_unstamped(self.model_dump(mode="json", by_alias=True))


def _may_be_null(field: FieldInfo) -> bool:
    return not field.is_required() and field.default is None


def _without_unstamped(record: JSONObject) -> JSONObject:
    if "config_id" in record and record["config_id"] is None:
        del record["config_id"]
    if record.get("interrupted_calls") == 0:  # a retry no kill cut short says nothing of it
        del record["interrupted_calls"]
    if record.get("tool_servers_given_up") == {}:  # nor one that lost no tool server
        del record["tool_servers_given_up"]
    if "input_digest" in record and record["input_digest"] is None:  # a caller gave none
        del record["input_digest"]
    for inner in ("attempts", "retries"):
        for part in record.get(inner) or []:
            _without_unstamped(part)
    return record


class LimitRecord(Record):
    """A limit that stopped a retry, an attempt or a task (``agent/limits.py``)."""

    kind: str  # the key under benchmark.execution, e.g. "task_cost_limit_usd"
    limit: float | None = None  # None: a limit an older record did not name
    spent: float | None = None


class JudgementRecord(Record):
    """A judge's decision on one answer (``bench/judge.py``'s Judgement, on disk)."""

    # None when there is no ground truth (not judged), or when ``unjudged``.
    correct: bool | None = None
    judge: str = "none"
    reason: str = ""
    score: float | None = None  # partial credit in [0, 1]
    usage: Usage | None = None  # the judge model's tokens (LLM judge only)
    # The protocol's label, from its label set (e.g. SimpleQA's CORRECT, INCORRECT,
    # NOT_ATTEMPTED); None: the judge has only correct / incorrect.
    label: str | None = None
    # The response's own confidence, 0-100, as the judge read it (BrowseComp, HLE:
    # calibration error); None when the protocol does not ask for it.
    confidence: float | None = None
    extracted_answer: str | None = None  # the final answer the judge found, if asked
    # The judge was asked but gave no verdict (no readable reply after its re-asks, or
    # its model failed): not counted in accuracy, counted apart; a resume asks again.
    unjudged: bool = False
    asks: int = 0  # the judge model's calls for this answer (re-asks included)

    @model_serializer(mode="wrap")
    def _said_only_when_set(self, handler: SerializerFunctionWrapHandler) -> JSONObject:
        """The fields after ``usage`` only when they say something, so a judgement of a
        judge without labels keeps schema 1's shape."""
        data: JSONObject = handler(self)
        for key, unset in _JUDGEMENT_DEFAULTS.items():
            if key in data and data[key] == unset:
                del data[key]
        return data


_JUDGEMENT_DEFAULTS: JSONObject = {
    "label": None,
    "confidence": None,
    "extracted_answer": None,
    "unjudged": False,
    "asks": 0,
}


class Spent(Protocol):
    """What some work spent, as a retry, a task and an :class:`Expense` say it."""

    @property
    def usage(self) -> Usage: ...
    @property
    def cost(self) -> float | None: ...  # USD; None when a call had no price
    @property
    def elapsed_seconds(self) -> float | None: ...


class Expense(Record):
    """Spending that is no retry: the calls of a killed run's journal, a sum."""

    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    elapsed_seconds: float | None = None


class RetryRecord(ResultRecord):
    """One format-retry: one run of the turn loop and its closing."""

    retry: int = 0
    final_answer: str | None = None
    provenance: str = "none"
    end_reason: str | None = None
    end_detail: str | None = None  # e.g. why the task alone cannot fit the window
    # The question alone is over the window: no retry or attempt of it could fit.
    does_not_fit: bool = False
    turns: int = 0
    tool_calls: int = 0
    prefix_breaks: int = 0
    rollbacks: int = 0
    post_mortem: str | None = None
    failure_type: str | None = None
    limit: LimitRecord | None = None
    carried_post_mortems: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None  # USD; None when a call had no price
    # Of ``usage`` and ``cost``, the page extractor's calls (scrape_and_extract_info).
    extraction_usage: Usage = Field(default_factory=Usage)
    # A sum of prices: 0 (no extraction call) has always been written as an integer.
    extraction_cost: int | float | None = 0
    journal: str | None = None  # relative to the run directory
    elapsed_seconds: float | None = None
    config_id: str | None = None  # the settings it ran under (store/run_config.py)
    # The model calls of the killed run(s) this retry went on from (resume=turn), in
    # ``usage`` already; written only when there were some.
    interrupted_calls: int = 0
    # Tool servers given up on for the run that this retry wanted (server -> why: how
    # its process ended, its last stderr lines): it ran without their tools.
    # ``tools/given_up.py``; written only when there were some.
    tool_servers_given_up: dict[str, str] = Field(default_factory=dict)


class AttemptRecord(ResultRecord):
    """One attempt of pass@k: its format-retries and the judgement of its answer."""

    attempt: int = 1
    final_answer: str | None = None
    provenance: str = "none"
    correct: bool | None = None
    judgement: JudgementRecord | None = None
    carried_post_mortems: int = 0  # by the retry that answered
    limit: LimitRecord | None = None
    retries: list[RetryRecord] = Field(default_factory=list)
    config_id: str | None = None


class ProgressLine(ResultRecord):
    """What a ``progress.jsonl`` line adds to the retry or attempt it records."""

    schema_version: int = SCHEMA_VERSION
    ts: str
    event: str
    # The task's inputs it ran on (bench/inputs.py): a resume sets aside the progress of
    # a task whose inputs changed since. None: written before digests, or by a caller
    # that gave none.
    input_digest: str | None = None

    def to_json(self) -> JSONObject:
        """The line as written: ``ts``, ``event`` and the run's ``config_id`` first, the
        record's fields next, as every release wrote them; the keys later releases added
        (``input_digest``, then ``schema_version``) last, where they move none of those."""
        fields = super().to_json()
        head = {key: fields.pop(key) for key in ("ts", "event", "config_id") if key in fields}
        added = {key: fields.pop(key) for key in ("input_digest",) if key in fields}
        version = fields.pop("schema_version")
        return head | fields | added | {"schema_version": version}


class RetryFinished(RetryRecord, ProgressLine):
    """A ``progress.jsonl`` line: a retry ended (a resume carries its post-mortem)."""

    event: Literal["retry_finished"] = "retry_finished"


class AttemptFinished(AttemptRecord, ProgressLine):
    """A ``progress.jsonl`` line: an attempt ended and was judged."""

    event: Literal["attempt_finished"] = "attempt_finished"


class TaskRecord(ResultRecord):
    """A line of ``benchmark_results.jsonl``: a task, finished or failed, with everything
    it spent. ``correct`` is the last attempt's (attempts stop at the first correct one);
    a failed task with a ground truth counts as wrong, so accuracy never improves because
    the model or a server broke down."""

    schema_version: int = SCHEMA_VERSION
    task_id: str
    question: str = ""
    ground_truth: str | None = None  # as text (bench/tasks.py turns any JSON into text)
    file_path: str | None = None
    final_answer: str | None = None
    provenance: str = "none"
    correct: bool | None = None
    judgement: JudgementRecord | None = None
    status: TaskStatus = "finished"
    error: str | None = None  # ``Type: message`` of a failed task
    end_reason: str | None = None
    end_detail: str | None = None
    attempts: list[AttemptRecord] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None  # USD; None when a call had no price
    # The judge's own model calls, apart: another model, another price.
    judge_usage: Usage = Field(default_factory=Usage)
    extraction_usage: Usage = Field(default_factory=Usage)  # part of ``usage``
    turns: int = 0
    tool_calls: int = 0
    prefix_breaks: int = 0
    elapsed_seconds: float | None = None
    limit: LimitRecord | None = None  # the task's own limit that ended it
    stopped: Literal["does_not_fit"] | None = None  # nothing was left to try
    interrupted_calls: int = 0  # killed runs' model calls, counted in ``usage``
    # backend=ray: how often the worker running the task died under it (the task was
    # rerun from its last finished retry each time; bench/ray_backend.py).
    worker_lost: int = 0
    # Its retries' tool servers given up on: a task that ran without them is an error.
    tool_servers_given_up: dict[str, str] = Field(default_factory=dict)
    config_id: str | None = None
    # A sha256 of what the task asked and how it was judged: question, ground truth,
    # attached file's bytes, judge (bench/inputs.py). A resume runs the task again when
    # it differs from the task's now. None: a line written before digests.
    input_digest: str | None = None
    # This result replaced one whose inputs had changed (the old line is not counted).
    inputs_changed: bool = False
    # The task line's fields a grader or a breakdown needs besides id, question, ground
    # truth and file (GAIA's Level, HLE's category, ...), as the task file had them.
    metadata: JSONObject = Field(default_factory=dict)

    def to_json(self) -> JSONObject:
        """As the release before typed records wrote it: ``limit``, ``stopped``,
        ``interrupted_calls``, ``worker_lost`` and ``inputs_changed`` only on the lines
        they say something on."""
        record = super().to_json()
        for key in (
            "limit",
            "stopped",
            "interrupted_calls",
            "worker_lost",
            "inputs_changed",
            "metadata",
        ):
            if not record.get(key):
                record.pop(key, None)
        return record

    @property
    def retries(self) -> list[RetryRecord]:
        return [r for a in self.attempts for r in a.retries]

    @classmethod
    def finished(cls, task: TaskFacts, attempts: list[AttemptRecord], elapsed: float) -> Self:
        """A task whose attempts ran to their end: the last one answers for it. A task
        that lost a tool server on the way is an error all the same, its answer judged
        as given: it ran without that server's tools."""
        retries = [r for a in attempts for r in a.retries]
        final, last_retry = attempts[-1], attempts[-1].retries[-1]
        given_up = {k: v for r in retries for k, v in r.tool_servers_given_up.items()}
        return cls._build(
            task,
            retries,
            elapsed,
            final_answer=final.final_answer,
            provenance=final.provenance,
            correct=final.correct,
            judgement=final.judgement,
            end_reason=last_retry.end_reason,
            end_detail=last_retry.end_detail,
            attempts=attempts,
            usage=sum_usage(r.usage for r in retries),
            cost=sum_cost(r.cost for r in retries),
            judge_usage=sum_usage(a.judgement.usage for a in attempts if a.judgement),
            tool_servers_given_up=given_up,
            **(_given_up_error(given_up) if given_up else {}),
        )

    @classmethod
    def failed(
        cls,
        task: TaskFacts,
        error: BaseException,
        elapsed: float,
        spent: Spent,
        finished: list[RetryRecord],
    ) -> Self:
        """A task that failed outright; a resume runs it again from its ``finished``
        retries. ``spent``: everything it spent, the failed retry's calls included."""
        return cls._build(
            task,
            finished,
            elapsed,
            correct=None if task.ground_truth is None else False,
            status="error",
            error=f"{type(error).__name__}: {error}",
            end_reason="error",
            usage=spent.usage,
            cost=spent.cost,
        )

    @classmethod
    def _build(
        cls, task: TaskFacts, retries: list[RetryRecord], elapsed: float, **fields: Any
    ) -> Self:
        """The fields every task record computes the same way, finished or failed."""
        return cls(
            task_id=task.task_id,
            question=task.question,
            ground_truth=task.ground_truth,
            file_path=task.file_path,
            input_digest=task.digest,
            inputs_changed=task.inputs_changed,
            metadata=dict(task.metadata),
            extraction_usage=sum_usage(r.extraction_usage for r in retries),
            turns=sum(r.turns for r in retries),
            tool_calls=sum(r.tool_calls for r in retries),
            prefix_breaks=sum(r.prefix_breaks for r in retries),
            elapsed_seconds=round(elapsed, 3),
            **fields,
        )


def _given_up_error(given_up: dict[str, str]) -> dict[str, Any]:
    """The error fields of a task that ran without the tool servers ``given_up``."""
    names = ", ".join(repr(name) for name in given_up)
    reasons = "\n".join(given_up.values())
    error = f"ToolServerGivenUp: ran without {names}: {reasons}"
    return {"status": "error", "error": error}


class TaskFacts(Protocol):
    """What a task record repeats of the task itself (``bench/tasks.py``'s Task)."""

    @property
    def task_id(self) -> str: ...
    @property
    def question(self) -> str: ...
    @property
    def ground_truth(self) -> str | None: ...
    @property
    def file_path(self) -> str | None: ...
    @property
    def digest(self) -> str | None: ...  # of its inputs (bench/inputs.py); None: not known
    @property
    def inputs_changed(self) -> bool: ...  # it replaces a result of other inputs
    @property
    def metadata(self) -> JSONObject: ...  # the task file's fields kept (bench/tasks.py)


def sum_usage(usages: Iterable[Usage | None]) -> Usage:
    """The sum of some usages (None ones skipped)."""
    total = Usage()
    for usage in usages:
        if usage is not None:
            total += usage
    return total


def sum_cost(costs: Iterable[float | None]) -> float | None:
    """The sum of some costs; unknown (None) if any one is."""
    known = list(costs)
    return None if any(c is None for c in known) else float(sum(c or 0.0 for c in known))


def total_spent(spendings: Iterable[Spent]) -> Expense:
    """Tokens and cost of some work together (cost unknown if any part's is)."""
    parts = list(spendings)
    return Expense(usage=sum_usage(s.usage for s in parts), cost=sum_cost(s.cost for s in parts))


# ------------------------------------------------------------------------ summary.json


class TaskCounts(Record):
    total: int = 0
    finished: int = 0
    errors: int = 0
    judged: int = 0  # had a ground truth and was graded
    expected: int | None = None  # the suite's size, when known
    # Had a ground truth, but the judge gave no verdict: not in ``judged`` nor accuracy.
    unjudged: int = 0


class Tally(Record):
    judged: int = 0
    correct: int = 0
    accuracy: float | None = None


# The count of a tally comes first in summary.json. Pydantic orders fields base by base
# from the last base listed, so the count's base is listed after Tally.
class _TaskCount(Record):
    tasks: int = 0


class _AttemptCount(Record):
    attempts: int = 0


class ProvenanceTally(Tally, _TaskCount):
    pass


class AttemptTally(Tally, _AttemptCount):
    pass


class PostMortemSplit(Record):
    """Attempts by whether their answering retry carried post-mortems."""

    without: AttemptTally = Field(default_factory=AttemptTally)
    with_: AttemptTally = Field(default_factory=AttemptTally, alias="with")


class JudgeScore(Record):
    scored: int = 0
    mean: float | None = None


class TokenPair(Record):
    input: int = 0
    output: int = 0


class ExtractionTokens(TokenPair):
    tasks: int = 0  # tasks that made any page extraction call


class TokenCounts(Record):
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0


class TokenMeans(Record):
    input: float | None = None
    output: float | None = None
    cache_read: float | None = None
    cache_write: float | None = None


class TokenTotals(Record):
    total: TokenCounts = Field(default_factory=TokenCounts)
    mean_per_task: TokenMeans = Field(default_factory=TokenMeans)


class Distribution(Record):
    """Of whole counts: ``max`` and an odd-sized ``median`` stay integers on disk."""

    mean: float | None = None
    median: int | float | None = None
    max: int | float | None = None


class BudgetSummary(Record):
    limits: dict[str, float] = Field(default_factory=dict)
    spent_tokens: int = 0
    spent_usd: float = 0.0
    left_tokens: int | None = None
    left_usd: float | None = None
    exhausted: bool = False
    tasks_stopped: int = 0
    tasks_not_started: int = 0
    limits_hit: dict[str, int] = Field(default_factory=dict)


class EndpointCounts(Record):
    """One server of ``llm.endpoints``, from the run's journals: the calls it answered,
    the HTTP attempts it failed, its latency, and the share of the input it read from
    its prefix cache (``cache_read_tokens / input_tokens``)."""

    requests: int = 0
    errors: int = 0
    tasks: int = 0  # task attempts that made a call there
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_read_share: float | None = None
    latency_mean_seconds: float | None = None
    latency_p50_seconds: float | None = None
    latency_p95_seconds: float | None = None
    # Task attempts moved to it: away from a drained one, or back to it once healthy.
    moved_in: int = 0
    # Task attempts moved away from it: it was drained, or their first choice was
    # healthy again.
    moved_out: int = 0


class ConfigUse(Record):
    tasks: int = 0
    runs: list[int] = Field(default_factory=list)


class ConfigBreakdown(Record):
    """Tasks per config_id, when a permitted resume changed the settings."""

    ids: dict[str, ConfigUse] = Field(default_factory=dict)
    mixed_tasks: list[str] = Field(default_factory=list)


class GivenUpServer(Record):
    """A tool server given up on for the run: why, and the tasks that ran without it."""

    reason: str
    tasks: int = 0
    task_ids: list[str] = Field(default_factory=list)


class InputsChanged(Record):
    """Tasks run again on a resume because their question, ground truth, attached file or
    judge changed since their result was recorded (bench/inputs.py); the old results are
    not counted. ``unverified``: results written before input digests, kept."""

    tasks: int = 0
    task_ids: list[str] = Field(default_factory=list)
    unverified: int = 0


class SimpleQAMetrics(Record):
    """SimpleQA's published numbers (openai/simple-evals), over the graded tasks."""

    graded: int = 0  # judged tasks (unjudged ones are not graded)
    correct: int = 0
    incorrect: int = 0
    not_attempted: int = 0
    accuracy: float | None = None  # correct / graded
    not_attempted_rate: float | None = None  # not_attempted / graded
    accuracy_given_attempted: float | None = None  # correct / (correct + incorrect)
    f1: float | None = None  # harmonic mean of the two above


class CalibrationError(Record):
    """HLE's binned RMS calibration error, in percent (``bench/protocol_metrics.py``)."""

    value: float | None = None  # every bin counted
    as_published: float | None = None  # as HLE's script computes it: its last bin left out
    answers: int = 0
    bins: int = 0
    without_confidence: int = 0  # given the official 100
    reason: str | None = None  # why a value is null


class AccuracyInterval(Record):
    """HLE's 95 % interval of the accuracy (Wald), in percent."""

    accuracy: float | None = None
    half_width: float | None = None
    n: int = 0


class DeepSearchQAMetrics(Record):
    """DeepSearchQA's outcome rates and F1, over every graded task."""

    graded: int = 0
    fully_correct: int = 0
    fully_incorrect: int = 0
    correct_with_extraneous: int = 0
    # Partly right without an outcome label: partially correct or correct with extraneous
    # answers, which a score alone cannot tell apart.
    outcome_unknown: int = 0
    fully_correct_rate: float | None = None
    fully_incorrect_rate: float | None = None
    correct_with_extraneous_rate: float | None = None  # null while outcome_unknown > 0
    f1_mean: float | None = None


class AverageAtK(Record):
    """xbench's mean over repeats: the mean share of correct attempts per task."""

    k: int = 1
    tasks: int = 0
    value: float | None = None
    reason: str | None = None  # why the value is null


class ProtocolMetrics(Record):
    """The metrics a benchmark's protocol publishes, those ``benchmark.metrics`` chose,
    and ``benchmark.breakdown``'s accuracy per value of a task field."""

    simpleqa: SimpleQAMetrics | None = None
    calibration_error: CalibrationError | None = None
    confidence_interval: AccuracyInterval | None = None
    deepsearchqa: DeepSearchQAMetrics | None = None
    avg_at_k: AverageAtK | None = None
    breakdown: dict[str, dict[str, ProvenanceTally]] | None = None  # field -> value -> tally

    @model_serializer(mode="wrap")
    def _chosen_only(self, handler: SerializerFunctionWrapHandler) -> JSONObject:
        """Only the metrics chosen: one not asked for is left out, not null."""
        data: JSONObject = handler(self)
        return {key: value for key, value in data.items() if value is not None}


class SummaryRecord(ResultRecord):
    """``summary.json``: the numbers of a run; ``bench/metrics.py`` says what each means."""

    schema_version: int = SCHEMA_VERSION
    benchmark: str | None = None
    generated_at: str | None = None
    k: int = 1
    tasks: TaskCounts = Field(default_factory=TaskCounts)
    accuracy: float | None = None
    correct_first_attempt: int = 0
    pass_at_k: float | None = None
    correct_any_attempt: int = 0
    by_provenance: dict[str, ProvenanceTally] = Field(default_factory=dict)
    post_mortems: PostMortemSplit = Field(default_factory=PostMortemSplit)
    judge_score: JudgeScore = Field(default_factory=JudgeScore)
    judge_tokens: TokenPair = Field(default_factory=TokenPair)
    extraction_tokens: ExtractionTokens = Field(default_factory=ExtractionTokens)
    tokens: TokenTotals = Field(default_factory=TokenTotals)
    cost_total: float | None = None
    cost_mean_per_task: float | None = None
    cost_unknown_tasks: int = 0
    turns: Distribution = Field(default_factory=Distribution)
    tool_calls: Distribution = Field(default_factory=Distribution)
    prefix_breaks: Distribution = Field(default_factory=Distribution)
    end_reasons: dict[str, int] = Field(default_factory=dict)
    budget: BudgetSummary | None = None  # None: a summary from before budgets
    extra: JSONObject = Field(default_factory=dict)  # whatever the caller passed
    # The journals' replay (bench/economics.py), added once the run ends.
    # left_to_right: a section that says why it is unavailable is never read as figures.
    token_economics: EconomicsUnavailable | TokenEconomics | None = Field(
        default=None, union_mode="left_to_right"
    )
    configs: ConfigBreakdown | None = None  # only when a resume changed the settings
    # With llm.endpoints: each server's counts, by its URL (bench/metrics.py).
    endpoints: dict[str, EndpointCounts] | None = None
    # Tool servers given up on, by name; their tasks are among ``tasks.errors``.
    tool_servers_given_up: dict[str, GivenUpServer] | None = None
    # Only when a resume ran tasks again because their inputs changed, or kept results
    # written before input digests beside ones written with.
    inputs_changed: InputsChanged | None = None
    # Only when the preset chose metrics (benchmark.metrics) or a breakdown.
    protocol_metrics: ProtocolMetrics | None = None
    # Who priced each model of the run, by model name: "genai-prices 0.2.5
    # (openai/gpt-4.1)", "conf/pricing: gpt-4.1" (the config's table), or "unpriced";
    # left out when no model has a price (every cost unknown).
    prices: dict[str, str] | None = None

    def to_json(self) -> JSONObject:
        """The summary as written: the sections a run may not have are left out."""
        absent: dict[str, Any] = {
            name: True for name in _OPTIONAL_SECTIONS if getattr(self, name) is None
        }
        if not self.tasks.unjudged:  # said only when some task went unjudged
            absent["tasks"] = {"unjudged"}
        return self.model_dump(mode="json", by_alias=True, exclude=absent)


_OPTIONAL_SECTIONS = (
    "token_economics",
    "configs",
    "endpoints",
    "tool_servers_given_up",
    "inputs_changed",
    "protocol_metrics",
    "prices",
)


# ------------------------------------------------- judgings (`deepledger judge RUN_DIR`)


class JudgedAnswer(ResultRecord):
    """A line of ``judgings/<name>/results.jsonl``: a task's final answer as the run
    recorded it, judged again by the judging's judge (the run's own line untouched)."""

    schema_version: int = SCHEMA_VERSION
    task_id: str
    final_answer: str | None = None
    # None: no ground truth (ungraded), or the judge gave no verdict (``judgement.unjudged``).
    correct: bool | None = None
    judgement: JudgementRecord = Field(default_factory=JudgementRecord)


class VerdictRow(Record):
    """One row of an agreement table: the run's own verdict was this; the judging's
    said ``correct`` / ``incorrect``."""

    correct: int = 0
    incorrect: int = 0


class AgreementTable(Record):
    """The 2x2 table: rows the run's own verdict, columns the judging's."""

    correct: VerdictRow = Field(default_factory=VerdictRow)
    incorrect: VerdictRow = Field(default_factory=VerdictRow)


class Agreement(Record):
    """How far a judging agrees with the run's own judgement, on correct / incorrect:
    tasks both judged; ``percent``: the share with the same verdict (0-100); ``kappa``:
    Cohen's, (p_o - p_e) / (1 - p_e), None when p_e is 1 (both judges gave one verdict
    to every task) or nothing was compared. Left out: tasks either judge left unjudged,
    and tasks without a ground truth."""

    compared: int = 0
    agree: int = 0
    percent: float | None = None
    kappa: float | None = None
    table: AgreementTable = Field(default_factory=AgreementTable)
    left_out_unjudged: int = 0
    left_out_ungraded: int = 0


class JudgingSummary(ResultRecord):
    """``judgings/<name>/summary.json``: what a judging decided, and its agreement with
    the run's own judgement."""

    schema_version: int = SCHEMA_VERSION
    name: str
    generated_at: str | None = None
    judge: JSONObject = Field(default_factory=dict)  # its identity (bench/inputs.py)
    tasks: int = 0
    judged: int = 0  # graded correct or incorrect
    correct: int = 0
    accuracy: float | None = None  # correct / judged
    unjudged: int = 0
    ungraded: int = 0  # no ground truth
    judge_tokens: TokenPair = Field(default_factory=TokenPair)  # the judge model's, in all
    # None: the run has no judgement of its own to compare with.
    agreement: Agreement | None = None
    # The run's benchmark.metrics / breakdown over this judging's verdicts (avg@k left
    # out: a judging judges first answers only); None: the run chose none.
    protocol_metrics: ProtocolMetrics | None = None
