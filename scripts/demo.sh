#!/usr/bin/env bash
# The newcomer's main command: set up, then run the offline benchmark.
#
# Placeholder until the bundled offline model and the hermetic research suite land:
# for now it sets everything up and shows the composed run configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/deepledger bench --cfg job "$@"
echo
echo "deepledger: this is the configuration the offline benchmark will run with."
echo "The bundled model (llm=local) and the offline suite are not in this version yet;"
echo "see README.md, 'Status'."
