"""MiroThinker's gaia-validation-text-103, browsecomp and hle script lines, the program
name changed and nothing else, run end to end: one `deepledger bench` subprocess each,
from a folder laid out as MiroThinker's (apps/miroflow-agent, its data in ../../data),
against a loopback model that answers, and is the judge too (OPENAI_BASE_URL, as
MiroThinker's .env gives its judge's server).

The agent is the scripts' default, single_agent_keep5: its tool servers start for real
(search_and_scrape_webpage with no Serper key, tool-python's sandbox per task).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from tests.integration.test_mirothinker_command_lines import ENV, SCRIPT_LINE, SCRIPTS
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply
from tests.support.doubles.fake_search_server import FakeTencentSearch
from tests.support.wire import text_of, xml_call

TASKS = [
    {"task_id": "eiffel", "task_question": "How tall is the Eiffel Tower, in metres?",
     "ground_truth": "330"},
    {"task_id": "moon", "task_question": "In which year did people first walk on the Moon?",
     "ground_truth": "1969"},
]  # fmt: skip
# The first is the ground truth as written (no judge asked); the second is not, so the
# judge is asked, through OPENAI_BASE_URL.
ANSWERS = {"Eiffel": "330", "Moon": "1969, with Apollo 11"}
# The judge's reply in the form its prompt asks for: two lines for the GAIA-text rule,
# the four fields for HLE's and BrowseComp's.
JUDGE_REPLIES = {
    "exactly two lines": "CORRECT\nReason: The same year.",
    "extracted_final_answer": "extracted_final_answer: {answer}\nreasoning: The same year.\n"
    "correct: yes\nconfidence: 100",
}


def respond(request) -> Reply:
    """The agent's model, and the judge's when asked to grade."""
    conversation = "\n".join(text_of(m) for m in request.messages)
    answer = next(a for key, a in ANSWERS.items() if key in conversation)
    system = text_of(request.messages[0]) if request.messages[0]["role"] == "system" else ""
    for asked, reply in JUDGE_REPLIES.items():
        if "<use_mcp_tool>" not in system and asked in system:
            return Reply(reply.format(answer=answer))
    return Reply(f"I know this one. The answer is \\boxed{{{answer}}}.")


@pytest.mark.parametrize("script", ["gaia-validation-text-103", "browsecomp", "hle"])
def test_the_script_line_runs_end_to_end(script, tmp_path):
    _, benchmark, metadata, data, agent = next(s for s in SCRIPTS if s[0] == script)
    app = tmp_path / "apps" / "miroflow-agent"
    app.mkdir(parents=True)
    data_dir = tmp_path / "data" / data
    data_dir.mkdir(parents=True)
    lines = "".join(json.dumps(task) + "\n" for task in TASKS)
    (data_dir / metadata).write_text(lines)
    with FakeLLMServer(responder=respond) as llm:
        values = ENV | {"BASE_URL": llm.openai_base_url, "RESULTS_DIR": "../../logs/run"}
        line = SCRIPT_LINE.format(benchmark=benchmark, metadata=metadata, data=data, agent=agent)
        for name, value in sorted(values.items(), key=lambda item: -len(item[0])):
            line = line.replace(f"${name}", value)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JINA_", "SERPER_"))}
        env |= {"OPENAI_API_KEY": "sk-test-judge", "OPENAI_BASE_URL": llm.openai_base_url}
        done = subprocess.run(
            [sys.executable, "-m", "deepledger", *shlex.split(line)[1:]],
            cwd=app, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "logs" / "run" / "run_1"
    records = [
        json.loads(x) for x in (run_dir / "benchmark_results.jsonl").read_text().splitlines()
    ]
    got = {r["task_id"]: (r["final_answer"], r["correct"]) for r in records}
    assert got == {"eiffel": ("330", True), "moon": ("1969, with Apollo 11", True)}
    judged = [r for r in llm.requests if "1969, with Apollo 11" in text_of(r.messages[-1])
              and "<use_mcp_tool>" not in text_of(r.messages[0])]  # fmt: skip
    assert judged, "the judge was not asked through OPENAI_BASE_URL"
    manifest = (run_dir / "manifest.json").read_text()
    assert "single_agent_keep5" in manifest and "MiroThinker-Models" in manifest


def test_a_sogou_preset_searches_sogou_through_tencent_cloud(tmp_path):
    """agent=single_agent_with_sougou_keep5: the model is offered sogou_search, and its
    call reaches Tencent Cloud's API (a loopback fake checking the signature) with the
    credentials the preset passes to the search server."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "standardized_data.jsonl").write_text(json.dumps(TASKS[0]) + "\n")
    page = {"title": "埃菲尔铁塔", "link": "https://baike.example.cn/eiffel",
            "snippet": "埃菲尔铁塔高330米。", "site": "百科"}  # fmt: skip

    def model(request) -> Reply:
        conversation = "\n".join(text_of(m) for m in request.messages)
        if "埃菲尔铁塔高330米" in conversation:
            return Reply("Sogou says 330 metres: \\boxed{330}")
        call = xml_call("search_and_scrape_webpage", "sogou_search", {"Query": "埃菲尔铁塔 高度"})
        return Reply("Searching in Chinese.\n" + call)

    with (
        FakeLLMServer(responder=model) as llm,
        FakeTencentSearch({"埃菲尔铁塔 高度": [page]}, secret_id="AKIDe2e",
                          secret_key="e2e-secret-key-99") as tencent,
    ):  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JINA_", "SERPER_"))}
        env |= {"TENCENTCLOUD_SECRET_ID": "AKIDe2e", "TENCENTCLOUD_SECRET_KEY": "e2e-secret-key-99",
                "TENCENTCLOUD_WSA_BASE_URL": tencent.base_url, "OPENAI_API_KEY": "sk-judge",
                "OPENAI_BASE_URL": llm.openai_base_url}  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "deepledger", "bench", "benchmark=debug",
             f"benchmark.data.data_dir={data}", "agent=single_agent_with_sougou_keep5",
             "llm=qwen-3", f"llm.base_url={llm.openai_base_url}",
             f"hydra.run.dir={tmp_path / 'run'}"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        sent = list(tencent.requests)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r.body for r in sent] == [{"Query": "埃菲尔铁塔 高度", "Mode": 0, "Cnt": 10}]
    record = json.loads((tmp_path / "run" / "benchmark_results.jsonl").read_text().splitlines()[-1])
    assert (record["final_answer"], record["correct"]) == ("330", True)
    assert "e2e-secret-key-99" not in "".join(
        p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*") if p.is_file()
    )
