"""A second process holding a journal open, as a late writer does: a Ray worker of a
killed driver, still running its task for a moment while a resume begins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import TracebackType

# Holds the journal (deepledger's own Journal: its lock is the one under test), says so,
# then on a line from the test writes one more call (the one it had in flight) and ends.
_SCRIPT = """
import sys
from pathlib import Path
from deepledger.messages import Usage
from deepledger.records.events import LLMCall
from deepledger.store.journal import Journal

journal = Journal(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.readline()
journal.write(LLMCall(turn=99, messages=1, usage=Usage(input_tokens=7, output_tokens=1)))
journal.close()
"""
LATE_TOKENS = 7  # the input tokens of the late writer's call
LATE_CALL_MARK = '"event":"llm_call","turn":99,'  # in its line, as the journal writes it


class LateWriter:
    """``with LateWriter(path) as writer:`` the journal at ``path`` is held by another
    process until ``writer.finish()`` (its last call written) or the block's end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> LateWriter:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _SCRIPT, str(self.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        said = self._process.stdout.readline()
        assert said == "held\n", f"the late writer did not take the journal: {said!r}"
        return self

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def finish(self) -> None:
        """Write the call it had in flight, release the journal and end."""
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write("go\n")
        self._process.stdin.flush()
        assert self._process.wait(timeout=60) == 0

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=60)
