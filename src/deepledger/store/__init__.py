"""The run store: the only code that knows a run directory's layout and file names.

``run_store.py`` owns the folder (paths, locks, manifest, results, progress, redaction);
``journal.py`` the append-only event journal of one agent run inside it.
"""
