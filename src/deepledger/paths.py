"""Where a relative path of the configuration points.

The presets name the project's own data with relative paths (``benchmarks/example``,
``benchmarks/worldfacts/corpus``), written for a command started in the repository. A
relative path is read from the working directory when it exists there (a user's own
``data/`` folder wins), else from the project's root — the folder holding the ``conf/``
deepledger reads (``$DEEPLEDGER_CONFIG_DIR``'s parent, or the source checkout) — so
``deepledger bench`` started from any folder finds the presets' data. The tool servers
(the reader's ``--root``, the search corpus) resolve their paths with the same rule from
the same working directory, so they agree with the task loader.

It also owns deepledger's cache folder (:func:`cache_root`), which the search index,
the report's library bundle, the tool lists and the compiled tokenizer share.
"""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_DIR_ENV = "DEEPLEDGER_CONFIG_DIR"
CACHE_DIR_ENV = "DEEPLEDGER_CACHE_DIR"
CHECKOUT = Path(__file__).resolve().parents[2]  # src/deepledger/paths.py -> the repository


def project_roots() -> list[Path]:
    """The folders a relative path is looked up in after the working directory."""
    roots = []
    if configured := os.environ.get(CONFIG_DIR_ENV):
        roots.append(Path(configured).expanduser().resolve().parent)
    if CHECKOUT not in roots:
        roots.append(CHECKOUT)
    return roots


def resolve_data_path(text: str | os.PathLike[str]) -> Path:
    """``text`` as an absolute path: as written when absolute, else found in the working
    directory or the project's root (the working directory's when it is in neither, so
    a message about a missing path names the place a user would look first)."""
    path = Path(text).expanduser()
    if path.is_absolute():
        return path
    here = Path.cwd() / path
    if here.exists():
        return here
    for root in project_roots():
        if (root / path).exists():
            return root / path
    return here


def looked_in(text: str | os.PathLike[str]) -> str:
    """Where :func:`resolve_data_path` looked for a relative path, for a message."""
    path = Path(text).expanduser()
    if path.is_absolute():
        return str(path)
    places = [Path.cwd(), *project_roots()]
    return " or ".join(str(place / path) for place in dict.fromkeys(places))


def cache_root() -> Path:
    """deepledger's cache folder: ``$DEEPLEDGER_CACHE_DIR``, else ``~/.cache/deepledger``.
    Each cache keeps a subfolder of its own in it."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "deepledger")
