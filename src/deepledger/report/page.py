"""Write the report as one HTML file that opens anywhere, offline.

The file holds everything: the viewer's stylesheet and script (``assets/``), the Vega,
Vega-Lite and vega-embed libraries (vl-convert's bundle, no CDN), the chart specs, the
run's data as JSON, and each task's trajectory gzip-compressed and base64-encoded, so a
run of 1,000 tasks stays a file a browser opens at once: a trajectory is decompressed
(with the browser's own DecompressionStream) when the reader opens that task.

Every ``deepledger bench`` ends by writing its report, so the parts that do not depend
on the run are made once: the chart specs are rendered ahead (``assets/charts.json``,
see :mod:`deepledger.report.charts`; altair is not imported here), and the library
bundle, which vl-convert takes over a second to put together, is kept in deepledger's
cache folder (``$DEEPLEDGER_CACHE_DIR``, else ``~/.cache/deepledger``) under a name
that carries vl-convert's and Vega-Lite's versions.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gc
import gzip
import json
import logging
import re
from collections.abc import Iterator
from importlib import metadata, resources
from pathlib import Path
from typing import TypeVar

from deepledger.errors import RunDirectoryError
from deepledger.messages import JSONObject
from deepledger.paths import cache_root
from deepledger.records.results import SummaryRecord
from deepledger.report.collect import FIELD_LIMIT, RESULT_LIMIT, TEXT_LIMIT, RunData, collect
from deepledger.report.view import (
    CallPoint,
    ComparisonPayload,
    CumulativePoint,
    LabelledMark,
    LinePoint,
    MarkPoint,
    RunPayload,
    TaskDetail,
    WindowRule,
)
from deepledger.store.files import write_text_atomic
from deepledger.store.layout import RunLayout

log = logging.getLogger(__name__)

MAX_LINES = 400  # trajectories drawn in the run's prompt-tokens chart (evenly chosen)
MAX_MARKS = 3_000
MAX_POINTS = 1_500  # points per series of the cumulative chart
PRERENDERED_CHARTS = "charts.json"  # written by `python -m deepledger.report.charts`
Point = TypeVar("Point", CallPoint, MarkPoint)


@functools.cache
def _prerendered() -> JSONObject:
    rendered: JSONObject = json.loads(_asset(PRERENDERED_CHARTS))
    return rendered


def run_chart_specs() -> dict[str, JSONObject]:
    """The run report's chart specs, as altair rendered them ahead of time."""
    specs: dict[str, JSONObject] = _prerendered()["specs"]
    return specs


def vega_lite_version() -> str:
    """``MAJOR.MINOR`` of the Vega-Lite the specs are written for."""
    version: str = _prerendered()["vega_lite_version"]
    return ".".join(version.split(".")[:2])


def bundle_cache_path(version: str) -> Path:
    """Where the library bundle for Vega-Lite ``version`` is kept between runs."""
    converter = metadata.version("vl-convert-python")
    return cache_root() / "report" / f"vega-bundle-vlc{converter}-vl{version}.js"


@functools.cache
def chart_library() -> str:
    """Vega, Vega-Lite (the version the specs are written for) and vega-embed, as one
    script that sets ``window.vegaEmbed``: from the cache, else made and cached."""
    version = vega_lite_version()
    cached = bundle_cache_path(version)
    try:
        bundle = cached.read_text("utf-8")
        if "vegaEmbed" in bundle:  # a file that is not a bundle is made again
            return bundle
    except (OSError, UnicodeError):
        pass  # not made yet on this machine (or unreadable): make it
    import vl_convert  # a native module: imported only when the bundle must be made

    # The stub marks ``snippet`` required; at run time it defaults to the one that sets
    # the window's globals, which the page needs.
    bundle = vl_convert.javascript_bundle(vl_version=version)  # type: ignore[call-arg]
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cached, bundle, mode=0o644)
    # A read-only home (OSError) or a full disk there (write_text_atomic's
    # RunDirectoryError): the report is written from this copy; later ones make their own.
    except (OSError, RunDirectoryError) as exc:
        log.warning("the chart library could not be cached at %s: %s", cached, exc)
    return bundle


def _asset(name: str) -> str:
    return resources.files("deepledger.report").joinpath("assets", name).read_text("utf-8")


_UNSAFE_IN_SCRIPT = re.compile("[<\u2028\u2029\ud800-\udfff]")


def _json_for_script(value: object) -> str:
    """JSON that cannot end its <script> element early, whatever the model wrote, and
    that encodes as UTF-8: a lone surrogate (a model can write one) becomes an escape."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _UNSAFE_IN_SCRIPT.sub(lambda c: f"\\u{ord(c.group(0)):04x}", text)


def _packed(value: TaskDetail) -> str:
    raw = _json_for_script(value).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=6)).decode("ascii")


def render(title: str, payload: RunPayload | ComparisonPayload, packed: list[str]) -> str:
    """The page: ``payload`` is read by the viewer at once, ``packed`` on demand."""
    page = _asset("page.html")
    parts = {
        "<!--TITLE-->": _escape(title),
        "/*STYLE*/": _asset("report.css"),
        "/*CHART_LIBRARY*/": chart_library().replace("</script", "<\\/script"),
        "/*DATA*/": _json_for_script(payload),
        "/*PACKED*/": _json_for_script(packed),
        "/*VIEWER*/": _asset("report.js"),
    }
    # One pass: text put in is never searched for markers again.
    pattern = re.compile("|".join(re.escape(marker) for marker in parts))
    return pattern.sub(lambda found: parts[found.group(0)], page)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- one run --------------------------------------------------------------------------
@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a report is built. A large run's report holds
    about a million small dicts, lists and event records, none of them cyclic garbage;
    each collection of the oldest generation walks them all again, which was a fifth of
    a 500-task report's writing time. Whatever cyclic garbage the rest of the process
    makes meanwhile is collected once the report is written."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def write_run_report(root: Path, summary: SummaryRecord) -> Path:
    """Write ``root/report.html`` (atomically) and return its path. ``root``: a
    ``deepledger bench`` run directory or a ``deepledger run`` folder."""
    path = RunLayout(root).report
    write_text_atomic(path, render_run_report(root, summary), mode=0o644)
    return path


def render_run_report(root: Path, summary: SummaryRecord) -> str:
    """The report page of the run in ``root`` (either kind), written nowhere; the
    summary of a run as it is now: ``bench.report.current_summary(root)``."""
    with _collector_paused():
        return _render_run_report(root, summary)


def _render_run_report(root: Path, summary: SummaryRecord) -> str:
    return render(*run_page_parts(root, summary))


def run_page_parts(root: Path, summary: SummaryRecord) -> tuple[str, RunPayload, list[str]]:
    """The run's page as its parts: title, the data read at once and each task's packed
    trajectory. ``deepledger view`` serves the same page, and refetches the data of a
    live run, from these."""
    data = collect(root, summary)
    window = data.run["config"].get("llm.max_context_length")
    drawn = _drawn(len(data.tasks))
    payload: RunPayload = {
        "kind": "run",
        "run": data.run,
        "tasks": data.tasks,
        "charts": run_chart_specs(),
        "datasets": {
            "calls": _run_lines(data, drawn),
            "marks": [_labelled(m, data) for m in data.marks if m["task"] in drawn][:MAX_MARKS],
            "window": _window(window),
            "cumulative": _cumulative(data.calls),
            "turns": [
                {"turns": t["turns"]}
                for t in data.tasks
                if t["turns"] is not None and t["status"] != "unfinished"
            ],
        },
        "limits": {"text": TEXT_LIMIT, "result": RESULT_LIMIT, "field": FIELD_LIMIT},
        "lines_drawn": len(drawn),
    }
    calls, marks = _by_task(data.calls), _by_task(data.marks)
    packed = [
        _packed(
            {
                "journals": data.trajectories[i],
                "calls": [c for c in calls.get(i, []) if c["kind"] == "loop"],
                "marks": [_labelled(m, data) for m in marks.get(i, [])],
            }
        )
        for i in range(len(data.tasks))
    ]
    title = f"{data.run['benchmark']} · {data.run['config']['llm']} · {root.name}"
    return title, payload, packed


def _window(window: object) -> list[WindowRule]:
    if not isinstance(window, int):
        return []
    return [{"tokens": window, "label": f"window: {window:,} tokens (llm.max_context_length)"}]


def _labelled(item: MarkPoint, data: RunData) -> LabelledMark:
    return {**item, "label": f"{data.tasks[item['task']]['id']} · {item['run']}"}


def _drawn(count: int) -> set[int]:
    """The tasks whose lines the run's chart draws: at most MAX_LINES, spread evenly."""
    step = max(1, -(-count // MAX_LINES))
    return set(range(0, count, step))


def _run_lines(data: RunData, chosen: set[int]) -> list[LinePoint]:
    """The loop's calls of the ``chosen`` tasks."""
    return [
        {
            "key": f"{c['task']}/{c['run']}",
            "label": f"{data.tasks[c['task']]['id']} · {c['run']}",
            "turn": c["turn"],
            "input": c["input"],
        }
        for c in data.calls
        if c["kind"] == "loop" and c["task"] in chosen
    ]


def _cumulative(calls: list[CallPoint]) -> list[CumulativePoint]:
    step = max(1, -(-len(calls) // MAX_POINTS))
    rows: list[CumulativePoint] = []
    billed = uncached = 0
    for number, call in enumerate(calls, start=1):
        billed += call["input"]
        uncached += max(0, call["input"] - call["cache_read"])
        if number % step == 0 or number == len(calls):
            rows.append({"call": number, "series": "without a cache", "tokens": billed})
            rows.append({"call": number, "series": "not served from cache", "tokens": uncached})
    return rows


def _by_task(items: list[Point]) -> dict[int, list[Point]]:
    grouped: dict[int, list[Point]] = {}
    for item in items:
        grouped.setdefault(item["task"], []).append(item)
    return grouped
