#!/usr/bin/env bash
# Run one benchmark suite N times independently and print the average of the runs.
#
#   scripts/multi_run.sh N [hydra overrides...]
#   scripts/multi_run.sh 3 benchmark=simpleqa llm=local benchmark.execution.max_tasks=50
#   PARALLEL=1 scripts/multi_run.sh 3 ...      # the N runs at once, in the background
#
# Each run gets its own directory, logs/multi/<UTC timestamp>/run-<i>, so the runs share
# nothing (with PARALLEL=1 each run's terminal output goes to run-<i>.log). Afterwards
# `deepledger report logs/multi/<timestamp>/run-*` prints mean / std / min / max over the
# runs and lists every run that failed or is incomplete. The exit status is non-zero if
# any run failed (the average, with its problems, is printed all the same).
# To finish an interrupted batch, re-run the broken run by hand with its own
# hydra.run.dir=logs/multi/<timestamp>/run-<i> (it resumes), then `deepledger report`
# the batch's run-* directories again.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }

if [[ $# -lt 1 || ! "$1" =~ ^[1-9][0-9]*$ ]]; then
    usage >&2
    exit 2
fi
runs=$1
shift

batch_dir="logs/multi/$(date -u +%Y%m%dT%H%M%SZ)"
while [[ -e "$batch_dir" ]]; do  # another batch started this same second
    batch_dir="${batch_dir%-*}-$RANDOM"
done
mkdir -p "$batch_dir"
echo "multi_run: $runs runs in $batch_dir" >&2

# Sequential runs talk to the terminal (live progress); parallel ones each write a log.
run_one() {
    local i=$1
    shift
    if [[ "${PARALLEL:-0}" == "1" ]]; then
        .venv/bin/deepledger bench "hydra.run.dir=$batch_dir/run-$i" "$@" \
            >"$batch_dir/run-$i.log" 2>&1
    else
        .venv/bin/deepledger bench "hydra.run.dir=$batch_dir/run-$i" "$@"
    fi
}

declare -a status
if [[ "${PARALLEL:-0}" == "1" ]]; then
    declare -a pids
    for ((i = 1; i <= runs; i++)); do
        run_one "$i" "$@" &
        pids[i]=$!
    done
    for ((i = 1; i <= runs; i++)); do
        wait "${pids[i]}"
        status[i]=$?
    done
else
    for ((i = 1; i <= runs; i++)); do
        echo "multi_run: run $i of $runs -> $batch_dir/run-$i" >&2
        run_one "$i" "$@"
        status[i]=$?
    done
fi

failed=0
for ((i = 1; i <= runs; i++)); do
    if [[ ${status[i]} -ne 0 ]]; then
        echo "multi_run: run-$i exited with status ${status[i]}" >&2
        failed=$((failed + 1))
    fi
done

run_dirs=()
for ((i = 1; i <= runs; i++)); do
    run_dirs+=("$batch_dir/run-$i")  # listed even if missing, so the report can say so
done
.venv/bin/deepledger report "${run_dirs[@]}"
report_status=$?

if [[ $failed -gt 0 ]]; then
    echo "multi_run: $failed of $runs runs failed" >&2
    exit 1
fi
exit "$report_status"
