#!/usr/bin/env bash
# Loading at the size of the weights (issue 35): LanguageModel::load_file of a GPT-2-124M-shaped qkv checkpoint
# (about 500 MB, random weights, written by qkv itself), `qkv import` of the same shape in nanoGPT's names and
# `qkv import DIR` of a Hugging Face folder of that shape (the Hub's names and attn.bias buffers, 548 MB):
# seconds, CPU seconds and peak resident memory (each in a fresh process). Prints the RESULT lines and a table.
#
#   bench/run_load.sh                 # writes the two files under $LOAD_BENCH_DIR (default /tmp/qkv-load-bench)
#
# Env: BUILD_DIR (build/native), LOAD_BENCH_DIR, LOAD_BENCH_RUNS (3), LOAD_BENCH_SKIP_BUILD=1 (use what is built).
# The files stay in the page cache after they are written: the figures are those of a warm cache.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-$ROOT/build/native}
DIR=${LOAD_BENCH_DIR:-/tmp/qkv-load-bench}
RUNS=${LOAD_BENCH_RUNS:-3}
mkdir -p "$DIR"

if [[ "${LOAD_BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  cmake --preset native >/dev/null
  cmake --build --preset native -j "$(nproc)" --target qkv_load_bench qkv >/dev/null
fi
BENCH=$BUILD_DIR/bench/qkv_load_bench
QKV=$BUILD_DIR/cpp/tools/qkv

[ -f "$DIR/gpt2.safetensors" ] || "$BENCH" write-qkv "$DIR/gpt2.safetensors"
[ -f "$DIR/nanogpt.safetensors" ] || "$BENCH" write-nanogpt "$DIR/nanogpt.safetensors"
[ -f "$DIR/hub/model.safetensors" ] || "$BENCH" write-hub "$DIR/hub"

echo "== load_file, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$RUNS"); do "$BENCH" load "$DIR/gpt2.safetensors" | grep '^RESULT'; done

# import_run NAME FILE ARGS...: qkv import ARGS under GNU time, RESULT bench=NAME with the peak over FILE's size.
import_run() {
  local name=$1 file=$2
  shift 2
  local size
  size=$(stat -c %s "$file")
  for _ in $(seq "$RUNS"); do
    /usr/bin/time -f "%e %U %S %M" -o "$DIR/time.txt" "$QKV" import "$@" >/dev/null
    read -r wall user sys kb <"$DIR/time.txt"
    awk -v n="$name" -v w="$wall" -v u="$user" -v s="$sys" -v kb="$kb" -v size="$size" 'BEGIN {
      printf "RESULT bench=%s file_mb=%.1f seconds=%s cpu_seconds=%.2f peak_rss_mb=%.1f peak_over_file=%.2f\n",
        n, size / 1e6, w, u + s, kb * 1024 / 1e6, kb * 1024 / size }'
  done
}
echo "== qkv import --from nanogpt (GNU time: wall s, user s, sys s, peak KB)"
import_run import "$DIR/nanogpt.safetensors" "$DIR/nanogpt.safetensors" "$DIR/imported.safetensors" --from nanogpt \
  --heads 12
echo "== qkv import DIR, a Hugging Face GPT-2 folder (streamed into the model, saved from it)"
import_run import_pretrained "$DIR/hub/model.safetensors" "$DIR/hub" "$DIR/pretrained.safetensors"

if [ -f web/dist/node.js ]; then
  echo "== the npm package in Node: LanguageModel.load streamed from disk, and given the whole file's bytes"
  for mode in stream bytes; do node bench/load_stream.mjs "$DIR/gpt2.safetensors" "$mode" | grep '^RESULT'; done
  echo "== the npm package in Node: LanguageModel.fromPretrained of the folder (streamed), and importPretrained of its bytes"
  for mode in pretrained pretrained-bytes; do node bench/load_stream.mjs "$DIR/hub" "$mode" | grep '^RESULT'; done
else
  echo "(the npm package's side needs web/dist: bash scripts/build-wasm.sh && npm run build:web)"
fi
