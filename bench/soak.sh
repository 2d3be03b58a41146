#!/usr/bin/env bash
# Soak (bench/README.md, "Soak"): the char GPT trained for 10,000 steps natively and 2,000 steps through the
# npm package in Node, resident memory (and the wasm heap) sampled every 100 steps; then the report
# (bench/soak.md) and the plot (bench/soak.svg). Needs build/native (qkv_soak) and `npm run build:web`.
# Each run is capped (SOAK_MAX_SECONDS, default 3600 s): on a busy machine the report says where it stopped.
#
# usage: bash bench/soak.sh [native|node|report|all]   (default all; the runs append nothing, they overwrite)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
data=${SOAK_DATA:-../shared/data/tinyshakespeare.txt}
cap=${SOAK_MAX_SECONDS:-3600}
out=build/soak
mkdir -p "$out"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" > "$out/load-$what.txt"
if [[ $what == native || $what == all ]]; then
  ./build/native/bench/qkv_soak --steps "${SOAK_NATIVE_STEPS:-10000}" --every 100 --threads 2 --max-seconds "$cap" --data "$data" \
    > "$out/native.csv"
fi
if [[ $what == node || $what == all ]]; then
  node bench/soak.mjs --steps "${SOAK_NODE_STEPS:-2000}" --every 100 --threads 2 --max-seconds "$cap" --data "$data" \
    > "$out/node.csv"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load-$what.txt"
python3 bench/soak_report.py "$out/native.csv" "$out/node.csv" bench/soak.md bench/soak.svg
