"""The text of ``deepledger --help``: the commands, the exit codes, the config groups."""

from __future__ import annotations

from deepledger import __version__

USAGE = f"""\
deepledger {__version__} — a deep-research agent runtime

usage:
  deepledger bench [OVERRIDES...]           run a benchmark suite
  deepledger run "QUESTION" [OVERRIDES]     answer one question, any text; or
                                            question="...", or @FILE (question=@FILE)
                                            to read it from a UTF-8 file (@@: a
                                            literal @); task_file=PATH attaches a file
  deepledger report RUN_DIR [RUN_DIR...] [--out FILE]
                                            rebuild a run's summary and HTML report;
                                            several: compare them in one report
  deepledger replay RUN_DIR [KEY=VALUE...]  a run's cost under other context policies
                                            (agent.context.*, agent.keep_tool_result,
                                            llm.max_context_length; --price MODEL)
  deepledger judge RUN_DIR [KEY=VALUE...] [--name NAME] [-cd DIR]
                                            grade a finished run's answers again
                                            (benchmark.judge.*), beside its own
                                            judgement, with the agreement between them
  deepledger COMMAND --help                 Hydra's help: config groups and keys, and
                                            what the common keys mean
  deepledger bench --cfg job [OVERRIDES]    print the composed config and stop

OVERRIDES are Hydra overrides, e.g.
  llm=openai_compatible llm.base_url=http://127.0.0.1:8000/v1 llm.model_name=my-model
  agent=keep5_compress5 agent.keep_tool_result=3 benchmark.execution.max_tasks=10
For run, an argument is an override when its key is a config key or group (or hydra.*,
+key, ~key, a dotted key); any other argument is the question (after --, always).
Exit codes: 0 done, 1 some tasks failed, 2 a usage or configuration error, 130 Ctrl-C,
  141 the output pipe was closed.

Config groups:
  llm=local|local_qwen1.5b|openai_compatible|openai|azure_openai|anthropic|gemini|qwen-3|
    deepseek|openai_responses|qwen3-32b|claude|claude-3-7|gpt-5|minimax|
    minimax-m2.7-highspeed|minimax-m2.5-highspeed|default,
  agent=default|keep5_compress5|keep5_compress5_300turns|multi_agent|
    mirothinker_1.7_keep5_max200|mirothinker_1.7_keep5_max300|mirothinker_v1.5_keep5_max400,
    and every other agent preset of MiroThinker's under its name (docs/mirothinker.md),
  benchmark=example|worldfacts|gaia-validation|gaia-validation-text-103|browsecomp|
    browsecomp-zh|hle|hle-text-500|hle-text-2158|simpleqa|freshqa|fanoutqa|frames|
    xbench-deepsearch|webwalkerqa|seal-0|deepsearchqa|futurex|aime2025; MiroThinker's
    browsecomp_zh|xbench_deepsearch|xbench_deepresearch|debug|collect_trace|default.
Tool servers: tools.<name>.* (search, reader, python, web_search, search_and_scrape_webpage,
  tool-python, time); web.search_backend=serper|searxng|tavily|brave|local.
API keys are read from the environment (or ./.env), never from config files; a key given
as llm.api_key=... is used and never written.
"""
