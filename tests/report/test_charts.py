"""The report's chart specs (report/charts.py) against the data a real run's report
carries: every dataset a chart reads is one the collector fills, with every field the
chart encodes; the specs themselves carry no data."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deepledger.report import charts
from tests.support.report import embedded

RUN_CHARTS = ["prompt_run", "cumulative", "turns"]


def layers(spec: dict) -> Iterator[dict]:
    yield spec
    for layer in spec.get("layer", []):
        yield from layers(layer)


def reads(spec: dict) -> dict[str, set[str]]:
    """The named datasets a spec reads, each with the fields it encodes."""
    found: dict[str, set[str]] = {}
    for layer in layers(spec):
        if name := (layer.get("data") or {}).get("name"):
            fields = found.setdefault(name, set())
            for channel in (layer.get("encoding") or {}).values():
                for item in channel if isinstance(channel, list) else [channel]:
                    if isinstance(item, dict) and "field" in item:
                        fields.add(item["field"])
    return found


def test_every_spec_reads_named_data_and_carries_none():
    specs = {**charts.all_specs(), "runs": charts.runs_bars("accuracy", "accuracy", ".1%", "%")}
    for name, spec in specs.items():
        assert reads(spec), name
        assert "datasets" not in spec, name
        assert all("values" not in (layer.get("data") or {}) for layer in layers(spec)), name
    assert reads(specs["runs"]) == {"runs": {"label", "accuracy"}}


def test_the_guard_and_compaction_marks_have_their_colours_in_one_scale():
    point = next(
        layer
        for layer in layers(charts.prompt_tokens_run())
        if (layer.get("data") or {}).get("name") == "marks"
    )
    scale = point["encoding"]["color"]["scale"]
    assert scale["domain"] == list(charts.MARK_COLORS)
    assert scale["range"] == list(charts.MARK_COLORS.values())


@pytest.mark.parametrize("chart", RUN_CHARTS)
def test_a_run_charts_datasets_and_fields_are_in_the_report(finished_run, chart):
    data, _ = embedded(finished_run / "report.html")
    for dataset, fields in reads(charts.all_specs()[chart]).items():
        rows = data["datasets"][dataset]
        assert rows, (chart, dataset)  # a real run has calls, marks and a window
        assert fields <= set().union(*map(set, rows)), (chart, dataset)


def test_a_tasks_chart_reads_what_its_trajectory_carries(finished_run):
    data, trajectories = embedded(finished_run / "report.html")
    carried = {**trajectories[0], "window": data["datasets"]["window"]}
    for dataset, fields in reads(charts.prompt_tokens_task()).items():
        rows = carried[dataset]
        assert rows, dataset
        assert fields <= set().union(*map(set, rows)), dataset


def test_no_chart_fixes_its_value_axis_the_data_sets_it():
    """A fixed domain (the model's window, say) would squeeze a small run flat onto the
    axis; the window's rule is a layer of its own that the page leaves out unless the
    data comes near it (report.js: windowNearData)."""
    specs = {**charts.all_specs(), "runs": charts.runs_bars("cost", "cost", "$.4f", "$.2f")}
    for name, spec in specs.items():
        for layer in layers(spec):
            y = (layer.get("encoding") or {}).get("y") or {}
            assert not {"domain", "domainMax", "domainMin"} & set(y.get("scale") or {}), name
    window = [
        layer
        for layer in layers(charts.prompt_tokens_task())
        if (layer.get("data") or {}).get("name") == "window"
    ]
    assert len(window) == 1 and window[0]["mark"]["type"] == "rule"


def test_a_trajectory_of_one_turn_is_drawn_and_counts_get_whole_labels():
    """A line through one point draws nothing: the run's chart draws a trajectory of one
    turn as a point, so a question answered at once is seen. Tokens, calls and tasks
    are whole numbers: a small run's axes label no 0.2 or 0.5."""
    specs = charts.all_specs()
    line, single = [
        layer
        for layer in layers(specs["prompt_run"])
        if (layer.get("data") or {}).get("name") == "calls"
    ]
    assert line["mark"]["type"] == "line" and single["mark"]["type"] == "point"
    assert single["encoding"]["opacity"]["condition"]["test"] == "datum.points == 1"
    axes = [
        (layer.get("encoding") or {}).get(channel, {}).get("axis") or {}
        for spec in specs.values()
        for layer in layers(spec)
        for channel in ("x", "y")
        if "mark" in layer
    ]
    counted = [axis for axis in axes if axis.get("tickMinStep") == 1]
    assert len(counted) == 7  # turns (2), prompt tokens (2), calls, cumulative tokens, tasks
    assert all("% 1" in axis["labelExpr"] for axis in counted)
