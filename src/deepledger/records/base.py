"""What every record shares: pydantic model settings and the schema version."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

# The layout of the records in a run directory. 1: every release before typed records
# (no version written anywhere); 2: typed records, the version written into each file.
SCHEMA_VERSION = 2


class Record(BaseModel):
    """A record deepledger writes. Unknown fields are refused on writing (a misspelt
    field is a bug), kept on reading (a newer release may add some)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, defer_build=True)


def build_in_background(classes: Iterable[type[BaseModel]]) -> threading.Thread:
    """Build these records' validators and serializers on a daemon thread.

    Records are built on first use (``defer_build``: the command starts sooner). The
    ones a run writes only at its end (task, attempt and summary records) would then be
    built after the last model call, between the answer and the exit; built here while
    the run waits for its model, they cost the exit nothing. A class already built is
    skipped, and one in use meanwhile is simply built by whichever thread comes first."""

    def build() -> None:
        for cls in classes:
            cls.model_rebuild()

    thread = threading.Thread(target=build, name="deepledger-records", daemon=True)
    thread.start()
    return thread
