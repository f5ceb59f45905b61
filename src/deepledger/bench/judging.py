"""``deepledger judge RUN_DIR [KEY=VALUE ...] [--name NAME] [-cd DIR]``: grade a finished
run's answers again, without running the agent.

The run's recorded judge settings (``manifest.json``), with the overrides given (any
``benchmark.judge.*`` key, and ``benchmark.execution.max_concurrent``), judge each task's
final answer as its result line recorded it. The verdicts go to a judging of their own,
``judgings/<name>/`` in the run directory (``results.jsonl``, one :class:`JudgedAnswer`
a task, and ``summary.json``, a :class:`JudgingSummary`); the run's own results are not
touched. ``<name>`` is ``--name``, else made from the judge (``llm-hle-o3-mini``).

A judging goes on from what it wrote: run again, it judges only the tasks it has no
verdict for (none yet, or unjudged: the judge's model failed). ``judgings/<name>/
judging.json`` records the judge it was made with; another judge under the same name is
refused, so one judging never mixes two judges' verdicts.

Its summary gives the agreement with the run's own judgement on correct / incorrect:
percent agreement, Cohen's kappa and the 2x2 table, tasks either judge left unjudged or
without a ground truth left out and counted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from deepledger.bench.attempts import judge_failed
from deepledger.bench.inputs import judge_identity
from deepledger.bench.judge import Judge, Judgement
from deepledger.bench.judge_rules import check_protocol
from deepledger.bench.metrics import plural, ratio
from deepledger.bench.protocol_metrics import protocol_metrics, protocol_rows
from deepledger.bench.services import PresetPath, judge_llm_config, judge_of
from deepledger.config import JudgeConfig, JudgeName, LLMConfig
from deepledger.errors import (
    ConfigError,
    DeepLedgerError,
    EndpointRejectedError,
    EndpointUnreachableError,
    LLMError,
)
from deepledger.llm.factory import create_client, settings_from_config
from deepledger.messages import JSONObject
from deepledger.records.results import (
    Agreement,
    AgreementTable,
    JudgedAnswer,
    JudgementRecord,
    JudgingSummary,
    ProtocolMetrics,
    TaskRecord,
    TokenPair,
    VerdictRow,
)
from deepledger.store.files import append_encoded, encode_lines, read_jsonl, write_json_atomic
from deepledger.store.layout import JUDGING, RESULTS, SUMMARY, RunLayout
from deepledger.store.run_store import load_manifest, now, task_records

JUDGE_KEYS = tuple(f"benchmark.judge.{f.name}" for f in dataclasses.fields(JudgeConfig))
CONCURRENCY_KEY = "benchmark.execution.max_concurrent"
JUDGING_KEYS = (*JUDGE_KEYS, CONCURRENCY_KEY)
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class JudgingSetup:
    """The judge a judging uses and how many answers it judges at once."""

    judge: JudgeConfig
    max_concurrent: int
    # The run's published metrics, computed again from this judging's verdicts (avg@k
    # needs every attempt judged; a judging judges each task's final answer only).
    metrics: tuple[str, ...] = ()
    breakdown: tuple[str, ...] = ()


def judging_setup(run_dir: Path, overrides: Sequence[str]) -> JudgingSetup:
    """The run's recorded judge and concurrency with ``overrides`` applied (types
    checked as the config's are)."""
    try:
        _, config = load_manifest(run_dir)
    except DeepLedgerError as exc:  # not a run directory: a usage error
        raise ConfigError(str(exc)) from None
    bench = config["benchmark"]
    recorded = {
        k: v for k, v in (bench.get("judge") or {}).items() if k in JudgeConfig.__dataclass_fields__
    }
    judge_values: dict[str, str] = {}
    concurrent = int(bench["execution"].get("max_concurrent") or 1)
    for override in overrides:
        key, sep, raw = override.partition("=")
        if not sep or key not in JUDGING_KEYS:
            raise ConfigError(
                f"deepledger judge cannot change {override!r}: it takes KEY=VALUE for "
                f"{', '.join(JUDGING_KEYS)}."
            )
        if key == CONCURRENCY_KEY:
            concurrent = _positive_int(key, raw)
        else:
            judge_values[key.rsplit(".", 1)[1]] = raw
    try:
        node = OmegaConf.merge(
            OmegaConf.structured(JudgeConfig),
            recorded,
            OmegaConf.from_dotlist([f"{k}={v}" for k, v in judge_values.items()]),
        )
        judge = OmegaConf.to_object(node)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"deepledger judge: {str(exc).splitlines()[0]}") from None
    assert isinstance(judge, JudgeConfig)
    metrics = tuple(m for m in bench.get("metrics") or () if m != "avg_at_k")
    return JudgingSetup(judge, concurrent, metrics, tuple(bench.get("breakdown") or ()))


def _positive_int(key: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{key}={raw!r} must be a positive whole number.")
    return value


def judging_name(judge: JudgeConfig, model: LLMConfig | None) -> str:
    """A judging's default name, from what decides its verdicts."""
    parts = [judge.name]
    if model is not None:
        parts += [judge.rule, model.model_name]
    if judge.template:  # the user's own template text: its file's name
        parts.append(Path(judge.template).stem)
    return _NAME_UNSAFE.sub("_", "-".join(parts))


async def run_judging(
    run_dir: Path, overrides: Sequence[str], presets: PresetPath, name: str | None = None
) -> tuple[JudgingSummary, Path]:
    """Judge ``run_dir``'s answers (those not judged yet by this judging); the judging's
    summary, written, and its folder."""
    setup = judging_setup(run_dir, overrides)
    records = task_records(run_dir)
    if not records:
        raise ConfigError(f"{run_dir} has no result lines ({RESULTS}) to judge.")
    judge_cfg = setup.judge
    check_protocol(judge_cfg)  # labels, fields and a template: refused before any call
    model_cfg = judge_llm_config(judge_cfg, presets) if judge_cfg.name == JudgeName.LLM else None
    identity = judge_identity(judge_cfg, model_cfg)
    name = name or judging_name(judge_cfg, model_cfg)
    folder = RunLayout(run_dir).judging(name)
    _claim(folder, name, identity, overrides)
    done = {k: JudgedAnswer.load(v) for k, v in _latest(folder / RESULTS).items()}
    todo = [
        r for r in records.values() if r.task_id not in done or done[r.task_id].judgement.unjudged
    ]
    model = (create_client(model_cfg), settings_from_config(model_cfg)) if model_cfg else None
    try:
        judge = judge_of(judge_cfg, model)
        done |= await _judge_all(judge, todo, folder / RESULTS, setup.max_concurrent)
    finally:
        if model is not None:
            await model[0].aclose()
    summary = judging_summary(name, identity, list(records.values()), done, setup)
    await asyncio.to_thread(write_json_atomic, folder / SUMMARY, summary.to_json())
    return summary, folder


def _claim(folder: Path, name: str, identity: JSONObject, overrides: Sequence[str]) -> None:
    """The judging's folder, for this judge: a folder made by another judge is refused."""
    record = folder / JUDGING
    if record.is_file():
        try:
            made_by = json.loads(record.read_text(encoding="utf-8")).get("judge")
        except (OSError, ValueError, AttributeError):
            made_by = None  # unreadable: refused below, as another judge's
        if made_by != identity:
            raise ConfigError(
                f"the judging {name!r} ({folder}) was made by another judge ({made_by}); "
                f"this one is {identity}. Give this judging a name of its own with "
                "--name NAME, or remove that folder to judge it again."
            )
        return
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(record, {"judge": identity, "overrides": list(overrides), "created": now()})


def _latest(path: Path) -> dict[str, JSONObject]:
    """Each task's newest line (a task judged again after it was unjudged has two)."""
    return {str(line["task_id"]): line for line in read_jsonl(path) if "task_id" in line}


async def _judge_all(
    judge: Judge | None, records: list[TaskRecord], results: Path, concurrent: int
) -> dict[str, JudgedAnswer]:
    """Each record's answer judged, at most ``concurrent`` at once, each line appended
    as it is decided (a killed judging goes on from them); progress on stderr."""
    limit = asyncio.Semaphore(concurrent)
    judged: dict[str, JudgedAnswer] = {}

    async def one(record: TaskRecord) -> None:
        async with limit:
            judgement = await judge_answer(judge, record)
        line = JudgedAnswer(
            task_id=record.task_id,
            final_answer=first_attempt(record).final_answer,
            correct=judgement.correct,
            judgement=JudgementRecord.model_validate(dataclasses.asdict(judgement)),
        )
        await asyncio.to_thread(append_encoded, results, encode_lines([line.to_json()]))
        judged[record.task_id] = line
        said = _outcome(line)
        print(f"[{len(judged)}/{len(records)}] {record.task_id} {said}", file=sys.stderr)

    await asyncio.gather(*(one(r) for r in records))
    return judged


@dataclass(frozen=True)
class FirstAttempt:
    """What a task's first attempt answered and how the run judged it: what accuracy
    (pass@1) counts. Later attempts ran only after a wrong one, so judging the last
    answer would be pass@k."""

    final_answer: str | None
    correct: bool | None
    judgement: JudgementRecord | None


def first_attempt(record: TaskRecord) -> FirstAttempt:
    """``record``'s first attempt (a record without attempt lines: the task's own)."""
    if record.attempts:
        first = record.attempts[0]
        return FirstAttempt(first.final_answer, first.correct, first.judgement)
    return FirstAttempt(record.final_answer, record.correct, record.judgement)


async def judge_answer(judge: Judge | None, record: TaskRecord) -> Judgement:
    """``record``'s first attempt's answer judged; a judge model that fails leaves it
    unjudged (an endpoint that refuses the key or the model stops the judging: every
    answer would meet it)."""
    if judge is None or record.ground_truth is None:
        return Judgement(None, "none", "no ground truth: not judged")
    answer = first_attempt(record).final_answer
    try:
        return await judge.judge(record.question, answer, record.ground_truth)
    except EndpointUnreachableError as exc:
        return judge_failed(record.task_id, judge, exc)
    except EndpointRejectedError:
        raise
    except LLMError as exc:
        return judge_failed(record.task_id, judge, exc)


def _outcome(line: JudgedAnswer) -> str:
    if line.judgement.unjudged:
        return "unjudged"
    return {True: "correct", False: "wrong", None: "ungraded"}[line.correct]


def _verdict(correct: bool | None, judgement: JudgementRecord | None) -> bool | str:
    """A judge's verdict on one task: True / False, or why there is none."""
    if judgement is not None and judgement.unjudged:
        return "unjudged"
    return "ungraded" if correct is None else correct


def judging_summary(
    name: str,
    identity: JSONObject,
    records: list[TaskRecord],
    judged: dict[str, JudgedAnswer],
    setup: JudgingSetup | None = None,
) -> JudgingSummary:
    """The judging's counts and accuracy, its agreement with the run's own verdicts
    (None when the run judged no task itself), and the run's published metrics computed
    from this judging's verdicts (``setup``'s; none: None)."""
    lines = [judged[r.task_id] for r in records if r.task_id in judged]
    verdicts = [_verdict(line.correct, line.judgement) for line in lines]
    graded = [v for v in verdicts if isinstance(v, bool)]
    correct = sum(graded)
    run_judged = any(r.judgement is not None and r.judgement.judge != "none" for r in records)
    return JudgingSummary(
        name=name,
        generated_at=now(),
        judge=identity,
        tasks=len(lines),
        judged=len(graded),
        correct=correct,
        accuracy=ratio(correct, len(graded)),
        unjudged=verdicts.count("unjudged"),
        ungraded=verdicts.count("ungraded"),
        judge_tokens=TokenPair(
            input=sum(line.judgement.usage.input_tokens for line in lines if line.judgement.usage),
            output=sum(
                line.judgement.usage.output_tokens for line in lines if line.judgement.usage
            ),
        ),
        agreement=agreement(records, judged) if run_judged else None,
        protocol_metrics=_published(records, judged, setup),
    )


def _published(
    records: list[TaskRecord], judged: dict[str, JudgedAnswer], setup: JudgingSetup | None
) -> ProtocolMetrics | None:
    """The run's chosen metrics over this judging's verdicts: each task as if its one
    attempt had been judged so (its final answer is what was judged)."""
    if setup is None:
        return None
    rejudged = [
        record.model_copy(
            update={"correct": line.correct, "judgement": line.judgement, "attempts": []}
        )
        for record in records
        if (line := judged.get(record.task_id)) is not None
    ]
    return protocol_metrics(rejudged, setup.metrics, setup.breakdown, 1)


def agreement(records: list[TaskRecord], judged: dict[str, JudgedAnswer]) -> Agreement:
    """Percent agreement and Cohen's kappa between the run's verdicts on first attempts
    (rows) and the judging's (columns), over the tasks both graded correct or
    incorrect."""
    table = AgreementTable()
    unjudged = ungraded = 0
    for record in records:
        line = judged.get(record.task_id)
        own = first_attempt(record)
        first = _verdict(own.correct, own.judgement)
        second = _verdict(line.correct, line.judgement) if line else "unjudged"
        if isinstance(first, bool) and isinstance(second, bool):
            row = table.correct if first else table.incorrect
            row.correct, row.incorrect = row.correct + second, row.incorrect + (not second)
        elif "unjudged" in (first, second):
            unjudged += 1
        else:
            ungraded += 1
    both, neither = table.correct.correct, table.incorrect.incorrect
    n = both + neither + table.correct.incorrect + table.incorrect.correct
    return Agreement(
        compared=n,
        agree=both + neither,
        percent=round(100 * (both + neither) / n, 2) if n else None,
        kappa=cohen_kappa(table),
        table=table,
        left_out_unjudged=unjudged,
        left_out_ungraded=ungraded,
    )


def cohen_kappa(table: AgreementTable) -> float | None:
    """(p_o - p_e) / (1 - p_e) of a 2x2 table; None when nothing was compared or the
    chance agreement p_e is 1 (kappa is undefined there)."""
    a, b = table.correct.correct, table.correct.incorrect
    c, d = table.incorrect.correct, table.incorrect.incorrect
    n = a + b + c + d
    if not n:
        return None
    observed = (a + d) / n
    chance = ((a + b) * (a + c) + (c + d) * (b + d)) / (n * n)
    if chance >= 1:
        return None
    return round((observed - chance) / (1 - chance), 4)


def format_judging(summary: JudgingSummary, folder: Path) -> str:
    """What ``deepledger judge`` prints."""
    judged = summary.judged
    accuracy = f"{summary.accuracy:.3f}" if summary.accuracy is not None else "n/a"
    lines = [
        f"judging {summary.name}: {plural(summary.tasks, 'task')}, {judged} judged, "
        f"{summary.unjudged} unjudged, {summary.ungraded} without a ground truth",
        f"  accuracy       {accuracy} ({summary.correct}/{judged})",
        f"  judge tokens   {summary.judge_tokens.input:,} input · "
        f"{summary.judge_tokens.output:,} output (this judging's calls)",
    ]
    lines += [f"  {label:<14} {text}" for label, text in protocol_rows(summary.protocol_metrics, 1)]
    if (agreed := summary.agreement) is not None:
        lines += _agreement_lines(agreed)
    else:
        lines.append("  agreement      n/a (the run has no judgement of its own)")
    lines.append(f"Judging: {folder}")
    return "\n".join(lines)


def _agreement_lines(agreed: Agreement) -> list[str]:
    percent = f"{agreed.percent:.1f}%" if agreed.percent is not None else "n/a"
    kappa = f"{agreed.kappa:.3f}" if agreed.kappa is not None else "n/a"
    rows = (("correct", agreed.table.correct), ("incorrect", agreed.table.incorrect))
    return [
        f"  agreement      {percent} ({agreed.agree}/{agreed.compared}) with the run's own "
        f"judgement · Cohen's kappa {kappa}",
        f"{'this judging:':>36}{'correct':>9}{'incorrect':>11}",
        *(_table_row(f"    run's own: {name}", row) for name, row in rows),
        f"  left out       {agreed.left_out_unjudged} unjudged · "
        f"{agreed.left_out_ungraded} without a ground truth",
    ]


def _table_row(label: str, row: VerdictRow) -> str:
    return f"{label:<36}{row.correct:>9}{row.incorrect:>11}"
