"""Puts the source checkout's root on ``sys.path`` when imported: the benchmarks run as
scripts (``python benchmarks/fidelity/X.py``) and take their test doubles from
``tests/support/doubles``, which stays out of the installed package."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(1, ROOT)  # after the script's own folder, as a PYTHONPATH entry would be
