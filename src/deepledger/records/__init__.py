"""Typed records: everything deepledger writes to a run directory, as classes.

One class reads and writes each kind of line or file, so a field is added in one place.
``base.py`` holds the shared model settings and the schema version.
"""
