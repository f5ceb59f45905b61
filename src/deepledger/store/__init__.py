"""The run store: the only code that knows a run directory's layout and file names.

``layout.py``      every folder and file name of a run directory, drawn in its docstring;
                   the journal file-name grammar, written and read back there only
``files.py``       JSONL reading, whole-line appends, atomic replaces, the disk-full rule
``lock.py``        the folder's checks and its lock: one process per run directory
``redaction.py``   what keeps secrets out of every file written
``run_config.py``  which settings a resume may change, ``config_id``, the breakdown
``run_store.py``   ``RunStore``: the manifest, results, progress and journals of a run
``journal.py``     the append-only event journal of one agent run

What other layers import from here: ``RunStore``, ``RunLayout``, ``Journal`` and
``JournalBusyError``, ``redact``, ``config_id``. Each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepledger.lazy import lazy_exports

if TYPE_CHECKING:
    from deepledger.store.journal import Journal, JournalBusyError
    from deepledger.store.layout import RunLayout
    from deepledger.store.redaction import redact
    from deepledger.store.run_config import config_id
    from deepledger.store.run_store import RunStore

__getattr__ = lazy_exports(
    __name__,
    {
        "journal": ("Journal", "JournalBusyError"),
        "layout": ("RunLayout",),
        "redaction": ("redact",),
        "run_config": ("config_id",),
        "run_store": ("RunStore",),
    },
)

__all__ = [
    "Journal",
    "JournalBusyError",
    "RunLayout",
    "RunStore",
    "config_id",
    "redact",
]
