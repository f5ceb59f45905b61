"""What the report tests share: synthetic runs and reading a report's embedded data."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

from deepledger.bench.metrics import summarize
from deepledger.store.run_store import RESULTS, latest_records, read_jsonl
from deepledger.testing.synthetic_run import make_run

CONF = Path(__file__).resolve().parents[2] / "conf"


def runs_keeping(tmp_path: Path, keeps: tuple[int, ...], tasks: int) -> list[Path]:
    """One synthetic run per ``agent.keep_tool_result`` value, as a multirun makes."""
    return [
        make_run(
            tmp_path / f"keep{k}",
            tasks=tasks,
            conf_dir=CONF,
            seed=k + 10,
            overrides=[f"agent.keep_tool_result={k}"],
        )
        for k in keeps
    ]


def quick_summary(root: Path) -> dict:
    """The summary without the token economics (a replay of every journal: slow for
    500 tasks, and not what the report tests look at)."""
    records = list(latest_records(read_jsonl(root / RESULTS)).values())
    return summarize(records, pass_at_k=1, benchmark="worldfacts", tasks_expected=len(records))


def _script(html: str, name: str):
    found = re.search(rf'<script type="application/json" id="{name}">(.*?)</script>', html, re.S)
    return json.loads(found[1])


def embedded(report: Path) -> tuple[dict, list[dict]]:
    """The data and the unpacked trajectories written into a report."""
    html = report.read_text()
    packed = _script(html, "report-packed")
    return _script(html, "report-data"), [
        json.loads(gzip.decompress(base64.b64decode(p))) for p in packed
    ]
