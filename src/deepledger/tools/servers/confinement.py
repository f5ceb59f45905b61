"""Which local files a tool server may open for the model: THE check the reader and
tool-python's upload share.

A server is given root folders (``--root``: anything inside them) and single files
(``--file``: that file and nothing beside it). A path the model names is resolved to its
real location (``..`` collapsed, symlinks followed) and refused when that location
matches a secret-file rule (``deepledger.secret_files``) or lies in no root. Relative
paths start at the first root folder, else at the folder of the first single file, so an
attachment given as ``--file`` is found by its bare name. The check happens before the
file is opened: it guards against a model's mistakes, not against someone swapping in
symlinks at the same moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from deepledger.paths import looked_in, resolve_data_path
from deepledger.secret_files import SecretFiles


class LocalFileRefused(Exception):
    """A path the model may not open (or that does not exist); the message says why."""


class Confinement:
    """Root folders, single files and the secret-file rules of one server."""

    def __init__(
        self,
        roots: Sequence[Path] = (),
        files: Sequence[Path] = (),
        secrets: SecretFiles | None = None,
        who: str = "files may come from",  # how a refusal names the roots' purpose
    ) -> None:
        self.who = who
        self.secrets = secrets or SecretFiles.from_environment()
        self.roots = [existing_place(root, folder=True) for root in roots]
        self.files = [existing_place(file, folder=False) for file in files]
        for file in self.files:
            if (rule := self.secrets.rule_for(file)) is not None:
                raise PermissionError(self.secrets.refusal(str(file), rule))

    @property
    def places(self) -> list[Path]:
        """Every root folder and single file, for messages and tool descriptions."""
        return [*self.roots, *self.files]

    @property
    def start(self) -> Path | None:
        """Where relative paths start."""
        if self.roots:
            return self.roots[0]
        return self.files[0].parent if self.files else None

    def resolve(self, path_text: str) -> Path:
        """The real path ``path_text`` names, if the model may open it and it exists."""
        start = self.start
        if start is None:
            raise LocalFileRefused("Local files cannot be opened: no folder or file was allowed.")
        candidate = Path(path_text.strip())
        if not candidate.is_absolute():
            candidate = start / candidate
        try:
            real = candidate.resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
            raise LocalFileRefused(f"Cannot resolve {path_text}: {exc}") from exc
        # The rule first, and before existence: a refused name says nothing about whether
        # such a file is there.
        if (rule := self.secrets.rule_for(real)) is not None:
            raise LocalFileRefused(self.secrets.refusal(path_text, rule))
        inside = any(real.is_relative_to(root) for root in self.roots) or real in self.files
        if not inside:
            allowed = ", ".join(str(place) for place in self.places)
            raise LocalFileRefused(f"{path_text} is outside the folders {self.who} ({allowed}).")
        if not real.exists():
            raise LocalFileRefused(
                f"No such file: {path_text} is not an existing file (relative paths start "
                f"at {start})."
            )
        return real

    def hidden(self, entry: Path) -> bool:
        """Whether a folder listing leaves ``entry`` out (its name matches a rule)."""
        return self.secrets.rule_for(entry.name) is not None


def existing_place(place: Path, folder: bool) -> Path:
    """A root folder or single file as its real path; a missing one is a startup error.
    A relative one is read from the working directory, else from the project's root, as
    ``benchmark.data.data_dir`` is (``deepledger.paths``): a run started outside the
    repository passes the presets' ``benchmarks/...`` as they are written."""
    what = "folder" if folder else "file"
    try:
        real = resolve_data_path(place).resolve(strict=True)
    except FileNotFoundError:
        looked = looked_in(place)
        raise FileNotFoundError(f"{place}: no such {what} (looked for {looked})") from None
    if folder and not real.is_dir():
        raise NotADirectoryError(f"{place} is not a folder")
    if not folder and not real.is_file():
        raise FileNotFoundError(f"{place} is not a file")
    return real
