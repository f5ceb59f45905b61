"""What every record shares: pydantic model settings and the schema version."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# The layout of the records in a run directory. 1: every release before typed records
# (no version written anywhere); 2: typed records, the version written into each file.
SCHEMA_VERSION = 2


class Record(BaseModel):
    """A record deepledger writes. Unknown fields are refused on writing (a misspelt
    field is a bug), kept on reading (a newer release may add some)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, defer_build=True)
