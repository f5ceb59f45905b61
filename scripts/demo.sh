#!/usr/bin/env bash
# The newcomer's main command: set everything up, then run the offline benchmark.
#
# deepledger bench on the WorldFacts demo split (10 questions, answered from a fixed
# corpus by the search tool), with Qwen2.5-Coder-1.5B-Instruct served by llama.cpp on
# loopback: no API key, no network. Each task gets one format-retry that carries a
# post-mortem of the first try. About 6 minutes on 2 cores, after a first setup that
# builds llama.cpp (about 5 minutes, once) and installs the model (1.1 GB, once:
# Qwen's own GGUF file, checked by its sha256; docs/local-model.md). Extra arguments are
# Hydra overrides, e.g.
#   scripts/demo.sh benchmark.data.metadata_file=dev.jsonl
#   scripts/demo.sh llm=local      # the bundled SmolLM2-135M: fast, but never answers
#   scripts/demo.sh llm=openai_compatible llm.base_url=http://gpu-box:8000/v1 llm.model_name=NAME
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --qwen
exec .venv/bin/deepledger bench benchmark=worldfacts llm=local_qwen1.5b \
  agent.context_compress_limit=1 benchmark.execution.max_concurrent=1 "$@"
