"""The run store: the only code that knows a run directory's layout and file names.

``layout.py``      every folder and file name of a run directory, drawn in its docstring;
                   the journal file-name grammar, written and read back there only
``files.py``       JSONL reading, whole-line appends, atomic replaces, the disk-full rule
``lock.py``        the folder's checks and its lock: one process per run directory
``redaction.py``   what keeps secrets out of every file written
``run_config.py``  which settings a resume may change, ``config_id``, the breakdown
``run_store.py``   ``RunStore``: the manifest, results, progress and journals of a run
``journal.py``     the append-only event journal of one agent run
"""
