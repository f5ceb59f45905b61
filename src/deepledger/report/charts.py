"""The report's charts as Vega-Lite specs, built with altair.

Every spec reads named datasets (``calls``, ``marks``, ``window``...) that the page fills
in: the run's charts from the data written into the page, a task's chart from that
task's trajectory when the reader opens it. The specs themselves carry no data.

No spec fixes a value axis: each scale is set by the data the page gives it.

A run's four charts never change with its data, so they are rendered once, here, into
``assets/charts.json``, which the page reads: a run's report is written at the end of
every ``deepledger bench``, and importing altair alone took longer than the rest of the
report. After changing a chart, render them again (a test fails until then)::

    .venv/bin/python -m deepledger.report.charts
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import altair as alt

from deepledger.messages import JSONObject

HEIGHT = 260
# Turns are whole numbers: no label on a tick between two of them (a short run's axis).
TURN_AXIS = alt.Axis(tickMinStep=1, labelExpr="datum.value % 1 ? '' : format(datum.value, 'd')")
# Tokens and tasks are counted in whole numbers too: a question of a few tokens, or a
# run of one task, would otherwise get labels at 0.2, 0.4...
COUNT_AXIS = alt.Axis(tickMinStep=1, labelExpr="datum.value % 1 ? '' : format(datum.value, ',d')")
MARK_COLORS = {
    "window guard": "#c0392b",
    "compaction": "#2471a3",
    "compaction failed": "#af7ac5",
    "looping": "#d68910",
}


def _spec(chart: alt.TopLevelMixin) -> JSONObject:
    return chart.to_dict()


# altair's mark_* methods are typed through a decorator mypy reads as returning Any, so
# a chain that starts with one is given its type where it is bound.


def _window_rule() -> alt.Chart:
    """The model's window as a rule. It shares the prompts' scale, so the page gives it
    data only when the prompts come near it (``report.js``: ``windowNearData``): drawn
    always, it would set the axis and flatten a 2k-token task onto 0."""
    rule: alt.Chart = (
        alt.Chart(alt.NamedData(name="window"))
        .mark_rule(color="#c0392b", strokeDash=[6, 4])
        .encode(y=alt.Y("tokens:Q"), tooltip=[alt.Tooltip("label:N", title="")])
    )
    return rule


def _mark_points() -> alt.Chart:
    kinds = list(MARK_COLORS)
    points: alt.Chart = (
        alt.Chart(alt.NamedData(name="marks"))
        .mark_point(filled=True, size=40, opacity=0.75)
        .encode(
            x=alt.X("turn:Q"),
            y=alt.Y("input:Q"),
            color=alt.Color(
                "kind:N",
                title="event",
                scale=alt.Scale(domain=kinds, range=[MARK_COLORS[k] for k in kinds]),
            ),
            shape=alt.Shape("kind:N", title="event", scale=alt.Scale(domain=kinds)),
            tooltip=["kind:N", "label:N", "turn:Q", alt.Tooltip("input:Q", format=",")],
        )
    )
    return points


def prompt_tokens_run() -> JSONObject:
    """Every trajectory's prompt tokens per turn (one thin line each) against the
    model's window, with the turns where the guard, a compaction or the loop check
    acted."""
    lines = (
        alt.Chart(alt.NamedData(name="calls"))
        .mark_line(strokeWidth=1, opacity=0.35, color="#566573")
        .encode(
            x=alt.X("turn:Q", title="turn", axis=TURN_AXIS),
            y=alt.Y("input:Q", title="prompt tokens", axis=COUNT_AXIS),
            detail="key:N",
            tooltip=["label:N", "turn:Q", alt.Tooltip("input:Q", format=",")],
        )
    )
    return _spec(
        alt.layer(lines, _single_turns(), _window_rule(), _mark_points()).properties(
            width="container", height=HEIGHT
        )
    )


def _single_turns() -> alt.Chart:
    """A point for each trajectory of one turn, which a line alone does not draw (a
    question answered at once left the chart empty). Only those are seen: points on
    every line would blacken a run of hundreds of tasks."""
    points: alt.Chart = (
        alt.Chart(alt.NamedData(name="calls"))
        .transform_joinaggregate(points="count()", groupby=["key"])
        .mark_point(filled=True, size=24, color="#566573")
        .encode(
            x=alt.X("turn:Q"),
            y=alt.Y("input:Q"),
            # The others are kept, unseen: filtered out, a run with no one-turn
            # trajectory would give the layer no data, which Vega warns of.
            opacity=alt.condition("datum.points == 1", alt.value(0.7), alt.value(0)),
            tooltip=["label:N", "turn:Q", alt.Tooltip("input:Q", format=",")],
        )
    )
    return points


def prompt_tokens_task() -> JSONObject:
    """One task's prompt tokens per turn, a line per attempt and retry."""
    lines = (
        alt.Chart(alt.NamedData(name="calls"))
        .mark_line(point=True)
        .encode(
            x=alt.X("turn:Q", title="turn", axis=TURN_AXIS),
            y=alt.Y("input:Q", title="prompt tokens", axis=COUNT_AXIS),
            color=alt.Color("run:N", title="attempt · retry"),
            tooltip=[
                "run:N",
                "turn:Q",
                alt.Tooltip("input:Q", format=",", title="prompt tokens"),
                alt.Tooltip("cache_read:Q", format=",", title="cache read"),
                alt.Tooltip("output:Q", format=",", title="output tokens"),
            ],
        )
    )
    return _spec(
        alt.layer(lines, _window_rule(), _mark_points())
        .resolve_scale(color="independent", shape="independent")
        .properties(width="container", height=HEIGHT)
    )


def cumulative_input() -> JSONObject:
    """Input tokens billed over the run's calls, as a provider without a prompt cache
    bills them and the part a cache did not serve."""
    return _spec(
        alt.Chart(alt.NamedData(name="cumulative"))
        .mark_line()
        .encode(
            x=alt.X("call:Q", title="model calls, in the order they were made", axis=COUNT_AXIS),
            y=alt.Y("tokens:Q", title="cumulative input tokens", axis=COUNT_AXIS),
            color=alt.Color("series:N", title="", legend=alt.Legend(orient="top-left")),
            tooltip=["series:N", "call:Q", alt.Tooltip("tokens:Q", format=",")],
        )
        .properties(width="container", height=HEIGHT)
    )


def turns_histogram() -> JSONObject:
    return _spec(
        alt.Chart(alt.NamedData(name="turns"))
        .mark_bar(color="#5d6d7e")
        .encode(
            x=alt.X(
                "turns:Q",
                bin=alt.Bin(maxbins=40, minstep=1),
                title="turns per task",
                axis=alt.Axis(format="d"),
            ),
            y=alt.Y("count():Q", title="tasks", axis=COUNT_AXIS),
            tooltip=[alt.Tooltip("count():Q", title="tasks")],
        )
        .properties(width="container", height=HEIGHT)
    )


def runs_bars(field: str, title: str, fmt: str, axis_format: str) -> JSONObject:
    """One bar per run (the comparison report)."""
    return _spec(
        alt.Chart(alt.NamedData(name="runs"))
        .mark_bar(color="#2e86c1")
        .encode(
            x=alt.X("label:N", title="", sort=None, axis=alt.Axis(labelLimit=240, labelAngle=-20)),
            y=alt.Y(f"{field}:Q", title=title, axis=alt.Axis(format=axis_format)),
            tooltip=["label:N", alt.Tooltip(f"{field}:Q", format=fmt, title=title)],
        )
        .properties(width="container", height=HEIGHT)
    )


def all_specs() -> dict[str, JSONObject]:
    return {
        "prompt_run": prompt_tokens_run(),
        "prompt_task": prompt_tokens_task(),
        "cumulative": cumulative_input(),
        "turns": turns_histogram(),
    }


def prerendered() -> JSONObject:
    """What ``assets/charts.json`` holds: the Vega-Lite version altair writes specs for
    (the page bundles the matching library) and the run's chart specs."""
    return {"vega_lite_version": alt.SCHEMA_VERSION.lstrip("v"), "specs": all_specs()}


def prerendered_text() -> str:
    return json.dumps(prerendered(), indent=1, sort_keys=True) + "\n"


def main() -> None:
    from deepledger.report.page import PRERENDERED_CHARTS

    assets = resources.files("deepledger.report").joinpath("assets")
    target = Path(str(assets.joinpath(PRERENDERED_CHARTS)))
    target.write_text(prerendered_text(), encoding="utf-8")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
