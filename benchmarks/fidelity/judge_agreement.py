"""How our reading of judge replies agrees with each official grader's parser.

For every protocol's generated battery (``tests.support.doubles.judge_battery``: reply
shapes with the label their judge meant), each reply is read twice: by our rule's reader
(``bench/judge_rules.py``; unreadable there means asked again, then ``unjudged``) and by
the official parser's rule, restated below from the official graders as facts (their
regular expressions, fields and defaults). Each shape counts as agree or differ, and each
difference says which reading is the one the judge meant: ours, the official one, or
neither (ours unjudged where the official parser guessed wrong counts as neither).

    .venv/bin/python benchmarks/fidelity/judge_agreement.py

writes benchmarks/fidelity/results/judge_agreement.json and judge_agreement.md.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import _checkout  # noqa: F401  (the checkout on sys.path: tests.support.doubles)
from tests.support.doubles.judge_battery import BATTERIES, GRADES, Shape

from deepledger.bench.judge_rules import LLM_RULES

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "fidelity" / "results"
UNJUDGED = "unjudged"  # no label: ours after its re-asks, or an official grader that drops it


def simpleqa_official(reply: str) -> str:
    """simple-evals simpleqa_eval.py: the first A, B or C anywhere in the reply
    (``re.search(r"(A|B|C)")``); none: C (NOT_ATTEMPTED)."""
    match = re.search(r"(A|B|C)", reply)
    return GRADES[match.group(0) if match else "C"]


def browsecomp_official(reply: str) -> str:
    """simple-evals browsecomp_eval.py: the first ``correct: (yes|no)`` (case and the one
    space as written); none: no. (As published, the whole match "correct: yes" is then
    compared with "yes", so no reply is ever scored correct; the intended rule, its
    captured word, is what is compared here.)"""
    match = re.search(r"correct: (yes|no)", reply)
    return match.group(1) if match else "no"


_HLE_FIELDS = {"extracted_final_answer": str, "reasoning": str, "correct": str, "confidence": int}


def hle_official(reply: str) -> str:
    """HLE's judge script: the reply is a structured output (a JSON object with
    extracted_final_answer, reasoning, correct "yes" | "no", confidence an integer);
    a reply that is not one fails to parse and the sample is left without a judgement."""
    try:
        data = json.loads(reply)
    except ValueError:
        return UNJUDGED
    if not isinstance(data, dict) or set(data) != set(_HLE_FIELDS):
        return UNJUDGED
    if not all(isinstance(data[k], kind) for k, kind in _HLE_FIELDS.items()):
        return UNJUDGED
    return data["correct"] if data["correct"] in ("yes", "no") else UNJUDGED


def xbench_official(reply: str) -> str:
    """xbench-evals eval_grader.py: the first ``结论:*.(正确|错误)`` (any colons, then
    exactly one character); its text split on the ASCII ":" and the second part stripped
    (no ASCII colon: the whole match); 正确 scores 1, anything else (no match too) 0."""
    match = re.search(r"结论:*.(正确|错误)", reply)
    if match is None:
        return "错误"
    parts = match.group(0).split(":")
    value = parts[1].strip() if len(parts) > 1 else match.group(0)
    return "正确" if value == "正确" else "错误"


def frames_official(reply: str) -> str:
    """The FRAMES paper's autorater output format (no parser is published):
    ``"Decision:"`` then ``"TRUE"`` or ``"FALSE"``, read at its first place, in any case;
    none: no decision."""
    match = re.search(r'Decision:"?\s*"?(TRUE|FALSE)\b', reply, re.IGNORECASE)
    return match.group(1).upper() if match else UNJUDGED


def gaia_text_official(reply: str) -> str:
    """MiroThinker's GAIA-text judge (eval_utils.py): the whole reply, stripped, without
    a final ".", lower-cased, must be "correct" or "incorrect"; anything else is asked
    again (up to 10 times), then left NOT_ATTEMPTED: no verdict."""
    text = reply.strip().rstrip(".").lower()
    return {"correct": "CORRECT", "incorrect": "INCORRECT"}.get(text, UNJUDGED)


OFFICIAL: dict[str, tuple[str, Callable[[str], str]]] = {
    "simpleqa": ("simple-evals simpleqa_eval.py", simpleqa_official),
    "browsecomp": ("simple-evals browsecomp_eval.py", browsecomp_official),
    "hle": ("HLE judge script (structured output)", hle_official),
    "xbench": ("xbench-evals eval_grader.py", xbench_official),
    "frames": ("FRAMES paper's autorater format", frames_official),
    "gaia_text": ("MiroThinker eval_utils.py (GAIA-text)", gaia_text_official),
}


def ours(rule: str, reply: str) -> str:
    protocol = LLM_RULES[rule]  # type: ignore[index]  # the battery's keys are rules
    reading = protocol.read(reply)
    return UNJUDGED if reading is None else protocol.label_of(reading)


def compare(rule: str, shapes: list[Shape]) -> dict[str, object]:
    source, official = OFFICIAL[rule]
    counts: Counter[str] = Counter()
    families: dict[str, Counter[str]] = {}
    examples: list[dict[str, str]] = []
    for shape in shapes:
        meant = shape.intended or UNJUDGED
        mine, theirs = ours(rule, shape.reply), official(shape.reply)
        if mine == theirs:
            outcome = "agree"
        elif mine == meant:
            outcome = "ours_as_meant"
        elif theirs == meant:
            outcome = "official_as_meant"
        else:
            outcome = "neither"
        counts[outcome] += 1
        families.setdefault(shape.family, Counter())[outcome] += 1
        if outcome != "agree" and sum(1 for e in examples if e["outcome"] == outcome) < 4:
            examples.append(
                {"reply": shape.reply, "meant": meant, "ours": mine, "official": theirs,
                 "outcome": outcome}
            )  # fmt: skip
    return {
        "official_parser": source,
        "shapes": len(shapes),
        "agree": counts["agree"],
        "differ": len(shapes) - counts["agree"],
        "ours_as_meant": counts["ours_as_meant"],
        "official_as_meant": counts["official_as_meant"],
        "neither": counts["neither"],
        "families": {name: dict(c) for name, c in sorted(families.items())},
        "examples": examples,
    }


def markdown(table: dict[str, dict[str, object]]) -> str:
    lines = [
        "# Judge reply reading: ours vs the official parsers",
        "",
        "Generated by `.venv/bin/python benchmarks/fidelity/judge_agreement.py` over the",
        "battery in `tests.support.doubles.judge_battery` (each shape with the label its judge",
        "meant). A difference is counted under the reading that gives the meant label.",
        "",
        "| rule | official parser | shapes | agree | differ | ours as meant "
        "| official as meant | neither |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for rule, row in table.items():
        lines.append(
            f"| `{rule}` | {row['official_parser']} | {row['shapes']} | {row['agree']} | "
            f"{row['differ']} | {row['ours_as_meant']} | {row['official_as_meant']} | "
            f"{row['neither']} |"
        )
    lines += ["", "By shape family (agree / shapes):", ""]
    for rule, row in table.items():
        families = row["families"]
        assert isinstance(families, dict)
        shown = [f"{name} {c.get('agree', 0)}/{sum(c.values())}" for name, c in families.items()]
        lines.append(f"- `{rule}`: " + "; ".join(shown))
    lines += ["", "Examples of differences (reply, meant, ours, official):", ""]
    for rule, row in table.items():
        for example in row["examples"]:  # type: ignore[attr-defined]
            reply = json.dumps(example["reply"], ensure_ascii=False)
            lines.append(
                f"- `{rule}` {reply}: meant {example['meant']}, ours {example['ours']}, "
                f"official {example['official']}"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    table = {rule: compare(rule, make()) for rule, make in BATTERIES.items()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "judge_agreement.json").write_text(
        json.dumps(table, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (RESULTS / "judge_agreement.md").write_text(markdown(table), encoding="utf-8")
    print(markdown(table).split("\n\nExamples")[0])


if __name__ == "__main__":
    main()
