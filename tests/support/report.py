"""Reading what a report embeds, and a run's summary without its token economics."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

from deepledger.bench.metrics import summarize
from deepledger.records.results import SummaryRecord
from deepledger.store.files import latest_records, read_jsonl
from deepledger.store.layout import RESULTS


def quick_summary(root: Path) -> SummaryRecord:
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
