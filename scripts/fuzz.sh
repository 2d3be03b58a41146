#!/usr/bin/env bash
# Builds the libFuzzer targets (preset "fuzz": clang, ASan + UBSan) and runs each on its committed seed
# corpus (tests/fuzz/corpus/TARGET) plus a working corpus under build/fuzz/corpus (new inputs land there,
# not in the source tree). A crash stops the script with the input saved under build/fuzz/crashes/; turn
# it into a regression test (tests/fuzz/README.md).
#
# usage: bash scripts/fuzz.sh [--short | --runs N | --seconds S] [TARGET...]
#   --short       the test command's run (default): a fixed number of executions per target, sized so that
#                 the four together take about a minute and a half on 2 busy cores
#   --runs N      N executions per target
#   --seconds S   a time budget per target instead (the long run: e.g. --seconds 1800)
#   TARGET        safetensors, config, tokenizer, tsv (default: all four)
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A short_runs=([safetensors]=20000 [config]=20000 [tokenizer]=10000 [tsv]=50000)
limit=()
targets=()
while (($#)); do
  case $1 in
    --short) limit=(); shift ;;
    --runs) limit=("-runs=$2"); shift 2 ;;
    --seconds) limit=("-max_total_time=$2"); shift 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(safetensors config tokenizer tsv)

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)" >/dev/null
mkdir -p build/fuzz/crashes
for t in "${targets[@]}"; do
  work=build/fuzz/corpus/$t
  mkdir -p "$work"
  log=build/fuzz/$t.log
  # -seed=1: the short run is the same every time; -max_len: the seeds are small, real files are not.
  this=("${limit[@]}")
  ((${#this[@]})) || this=("-runs=${short_runs[$t]}")
  if ! "build/fuzz/tests/fuzz/${t}_fuzz" "${this[@]}" -seed=1 -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="build/fuzz/crashes/$t-" "$work" "tests/fuzz/corpus/$t" > "$log" 2>&1; then
    tail -n 40 "$log"
    echo "qkv fuzz: $t FAILED (input saved under build/fuzz/crashes/; log $log)"
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  echo "qkv fuzz: $t: ${runs:-?} executions in ${secs:-?} s, coverage ${cov:-?} edges, 0 crashes"
done
