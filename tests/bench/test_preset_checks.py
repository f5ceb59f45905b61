"""The llm presets other settings name (the judge's, the extraction model's, the
compaction notes') get the checks ``llm`` gets, when loaded: before any work."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from deepledger.bench.services import load_llm_preset
from deepledger.errors import ConfigError
from tests.support.bench import bench_command, results
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply

ROOT = Path(__file__).resolve().parents[2]
BAD_PRESET = """\
provider: openai
model_name: judge-model
base_url: "127.0.0.1:9/v1"
api_key_required: false
max_context_length: 8192
max_tokens: 512
"""


@pytest.fixture
def conf_dir(tmp_path) -> Path:
    """The project's conf/ with one more llm preset, ``bad``, whose base_url has no scheme."""
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "llm" / "bad.yaml").write_text(BAD_PRESET)
    return conf


@pytest.mark.parametrize(
    "key", ["benchmark.judge.llm", "tools.extract_llm", "agent.context.summary_llm"]
)
def test_a_preset_with_a_bad_base_url_is_refused_naming_the_setting(conf_dir, key):
    with pytest.raises(ConfigError) as refused:
        load_llm_preset("bad", conf_dir, key)
    message = str(refused.value)
    assert f"{key}=bad: llm.base_url='127.0.0.1:9/v1' is not an http(s) URL" in message


def test_a_good_preset_loads(conf_dir):
    assert load_llm_preset("openai_compatible", conf_dir).base_url.startswith("http://")


def test_a_bench_with_a_bad_judge_preset_stops_before_any_task(conf_dir, tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "DEEPLEDGER_CONFIG_DIR": str(conf_dir)}
    with FakeLLMServer(responder=lambda request: Reply("\\boxed{42}")) as server:
        command = bench_command(
            server.openai_base_url,
            run_dir,
            "benchmark.judge.name=llm",
            "benchmark.judge.llm=bad",
        )
        run = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        asked = len(server.requests)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "benchmark.judge.llm=bad: llm.base_url='127.0.0.1:9/v1'" in run.stderr
    assert "Traceback" not in run.stderr
    assert asked == 0 and results(run_dir) == []
