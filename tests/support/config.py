"""The repository's Hydra config, composed as the CLI composes it."""

from __future__ import annotations

from pathlib import Path

from deepledger.config import compose

CONF = Path(__file__).resolve().parents[2] / "conf"


def composed(*overrides: str):
    return compose(CONF, list(overrides))
