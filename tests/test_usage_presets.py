"""`deepledger --help` names every llm preset conf/llm holds."""

from __future__ import annotations

import re
from pathlib import Path

from deepledger.cli import USAGE

ROOT = Path(__file__).resolve().parents[1]


def test_the_usage_text_lists_every_llm_preset():
    listed = re.search(r"llm=([\w.|\s-]+),", USAGE)  # over several lines
    assert listed is not None
    presets = {p.stem for p in (ROOT / "conf" / "llm").glob("*.yaml")}
    assert set("".join(listed[1].split()).split("|")) == presets
