"""Every command's ``-h``/``--help``: a page of its own on stdout, exit 0; for bench and
run one short page made from the schema's key descriptions and the presets in conf/."""

from __future__ import annotations

import re

import pytest

from deepledger.cli import _command, _commands, main, wants_help
from deepledger.cli.common import config_dir
from tests.support.cli import deepledger

HYDRA_COMMANDS = ("bench", "run")


def presets() -> dict[str, set[str]]:
    """Each config group of conf/ and its presets, as the files name them."""
    conf = config_dir()
    groups = {g.name: {p.stem for p in g.glob("*.yaml")} for g in conf.iterdir() if g.is_dir()}
    return {group: names for group, names in groups.items() if names}


def config_defaults() -> dict[str, str]:
    """config.yaml's defaults list, read as plain YAML: ``- llm: local`` entries."""
    import yaml

    entries = yaml.safe_load((config_dir() / "config.yaml").read_text("utf-8"))["defaults"]
    return {k: v for entry in entries if isinstance(entry, dict) for k, v in entry.items()}


def listed_presets(page: str) -> dict[str, set[str]]:
    """The page's Presets section read back: ``  group=a, b,`` lines and their
    indented continuations."""
    section = page.split("\nPresets", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    listed: dict[str, list[str]] = {}
    group = ""
    for line in section:
        if not line.startswith("    "):
            group, _, line = line.strip().partition("=")
        listed.setdefault(group, []).extend(n.strip() for n in line.split(",") if n.strip())
    return {g: set(names) for g, names in listed.items()}


@pytest.mark.parametrize(("command", "flag"), [("bench", "--help"), ("run", "-h")])
def test_bench_and_run_help_is_one_short_page_from_the_schema_and_conf(command, flag):
    from deepledger.config.docs import key_docs, plain

    run = deepledger(command, flag)
    assert run.returncode == 0, run.stderr
    page = run.stdout
    lines = page.splitlines()
    assert len(lines) < 80, page  # a page, not Hydra's 300-line config dump
    assert "Powered by Hydra" not in page and "== Config ==" not in page
    assert lines[0].startswith(f"deepledger {command} — ")
    assert f"usage: deepledger {command} " in page
    common = [doc for doc in key_docs() if doc.common]
    assert len(common) >= 20
    for doc in common:  # every common key, in the schema's words, one line each
        line = next(line for line in lines if line.startswith(f"  {doc.key}="))
        assert len(line) <= 100, line
        said = line.split("  ", 2)[2].removesuffix(" ...")
        assert plain(doc.meaning).startswith(said), (line, doc.meaning)
    max_tokens = next(line for line in lines if line.startswith("  llm.max_tokens="))
    assert max_tokens == "  llm.max_tokens=4096  the reply budget of each call"
    assert listed_presets(page) == presets()
    for group, default in config_defaults().items():  # the default first
        line = next(line for line in lines if line.startswith(f"  {group}="))
        assert line.split("=", 1)[1].split(",")[0] == default, line
    assert f"deepledger {command} --cfg job" in page
    assert f"deepledger {command} --hydra-help" in page
    assert "Exit codes: 0 done" in page and "141" in page


def test_a_new_preset_file_shows_up_on_the_page(tmp_path):
    import shutil

    from deepledger.cli.usage import hydra_command_help

    conf = tmp_path / "conf"
    shutil.copytree(config_dir(), conf)
    (conf / "llm" / "my-new-model.yaml").write_text("provider: openai\n", encoding="utf-8")
    assert "my-new-model" in listed_presets(hydra_command_help("bench", conf))["llm"]


def test_hydras_own_help_is_still_reachable():
    run = deepledger("bench", "--hydra-help")
    assert run.returncode == 0, run.stderr
    assert "--cfg" in run.stdout and "--multirun" in run.stdout


def non_hydra_commands() -> list[str]:
    return [name for name in _commands() if name not in HYDRA_COMMANDS]


def test_every_other_command_has_a_help_page():
    names = non_hydra_commands()
    assert {"report", "replay", "judge"} <= set(names)
    for name in names:
        page = _command(name, _commands()[name]).help()
        assert page.startswith(f"deepledger {name} — "), name
        assert f"usage: deepledger {name}" in page and "Exit codes:" in page, name
        assert max(map(len, page.splitlines())) <= 100, name  # a terminal's width


@pytest.mark.parametrize("name", non_hydra_commands())
@pytest.mark.parametrize("args", [["--help"], ["-h"], ["logs/x", "KEY=1", "--help"]])
def test_help_anywhere_among_a_commands_arguments_prints_its_page(name, args, capsys):
    assert main([name, *args]) == 0
    out, err = capsys.readouterr()
    assert out.rstrip("\n") == _command(name, _commands()[name]).help().rstrip("\n")
    assert err == ""


def test_help_command_and_the_words_after_a_double_dash():
    assert wants_help(["--help"]) and wants_help(["q", "-h"])
    assert not wants_help(["--", "--help"])  # `deepledger run -- --help`: the question
    assert not wants_help(["what does --help do?"])


def test_deepledger_help_command_is_the_commands_page(capsys):
    assert main(["help", "replay"]) == 0
    assert capsys.readouterr().out.startswith("deepledger replay — ")


@pytest.mark.parametrize("name", ["report", "replay", "judge"])
def test_a_missing_run_dir_is_still_a_usage_error_on_stderr(name, capsys):
    assert main([name]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "usage: deepledger " + name in err


def test_deepledger_help_points_at_each_commands_page():
    run = deepledger("--help")
    assert run.returncode == 0
    assert "deepledger COMMAND --help" in run.stdout
    assert "Powered by Hydra" not in run.stdout


def test_no_command_is_a_usage_error_with_the_page_on_stderr(capsys):
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "deepledger COMMAND --help" in err


def test_a_commands_page_is_its_modules_help_whatever_its_entry(monkeypatch):
    from deepledger.cli import replay

    monkeypatch.setattr(replay, "HELP", "deepledger replay — a page")
    as_lambda = _command("replay", lambda args: replay.replay_command(args))
    assert as_lambda.help() == "deepledger replay — a page"


def test_deepledger_help_names_every_command_and_no_other():
    """A command added to the table shows on `deepledger --help` (and one taken away
    leaves it): the usage block's ``deepledger NAME`` lines are the table's commands."""
    from deepledger.cli.usage import USAGE

    usage_block = USAGE.split("\nOVERRIDES", 1)[0]
    named = set(re.findall(r"^  deepledger ([a-z]+)\b", usage_block, re.MULTILINE))
    assert named == set(_commands()), named ^ set(_commands())
    assert max(map(len, USAGE.splitlines())) <= 100


def test_the_presets_deepledger_help_names_exist():
    from deepledger.cli.usage import USAGE

    section = USAGE.split("\nConfig groups:\n", 1)[1].split("\nTool servers", 1)[0]
    existing = presets()
    for group, names in re.findall(r"^  (\w+)=(.*?)(?=^  \w+=|\Z)", section, re.M | re.S):
        runs = re.findall(r"[\w.-]+(?:\|[\w.-]+)+", re.sub(r"\|\s+", "|", names))
        listed = [name.rstrip(".") for run in runs for name in run.split("|")]
        assert listed and set(listed) <= existing[group], (group, set(listed) - existing[group])


def test_every_flag_the_export_page_names_is_one_it_takes():
    from deepledger.cli.export import HELP, _parser

    taken = {flag for action in _parser()._actions for flag in action.option_strings}
    assert set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", HELP)) == taken
