"""Typed records: everything deepledger writes to a run directory, as classes.

One class reads and writes each kind of line or file, so a field is added in one place.
``base.py`` holds the shared model settings and the schema version; ``events.py`` every
journal event, one union told apart by ``event``; ``parts.py`` how the messages, calls,
results and images inside them are written and read; ``codec.py`` the one encoder and
decoder of journal lines and the reader of journal files (``read_journal``);
``results.py`` the task, attempt, retry, progress and summary records, with
``economics.py`` the summary's token economics; ``manifest.py`` the run manifest;
``schema.py`` the JSON schema the report page is checked against
(``python -m deepledger.records.schema`` regenerates ``report/assets/records.schema.json``).
"""
