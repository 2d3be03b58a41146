#!/usr/bin/env bash
# gpt2-large's shape in 4-bit in the browser build (issue 36, "Speed and memory"): 36 layers, 1280 wide, 20 heads,
# 774M parameters (3.1 GB in fp32, against the wasm core's 4 GiB), random weights.
#   1. bench/gpt2_export.py --shape large --hub-only writes the Hub folder (3.35 GB; /usr/bin/python3, torch);
#   2. natively: `qkv import` (the fp32 checkpoint, 3.1 GB), then `qkv quantize --weights q4` (and int8), and the
#      fp32 files are deleted;
#   3. the package in Node (bench/gpt2_node.mjs wasm FILE): LanguageModel.load of the q4 checkpoint, a 32-token
#      prompt and GPT2_LARGE_NEW greedy tokens, 2 threads: load s, prefill and decode ms, resident weights
#      (memory().parameters), RSS after the load and the peak; natively the same with qkv_gpt2_bench file;
#   4. what the package does with models at or past the wasm core's 4 GiB (bench/gpt2_node.mjs refuse: the
#      message, how long it took, the process's peak RSS): gpt2-xl's shape in fp32 through fromPretrained
#      (config.json and a sparse model.safetensors of its size: nothing is read when it is refused), and, while the
#      fp32 files exist, gpt2-large in fp32 through fromPretrained (the Hub folder) and LanguageModel.load (the
#      imported checkpoint): a model that does not fit must be refused before allocation with the bytes needed
#      against those available; one that fits loads ("NOT REFUSED").
#
#   bench/run_gpt2_large.sh            # needs ~7 GB free under GPT2_LARGE_DIR at its peak, ~0.7 GB after
# Env: BUILD_DIR (build/native), GPT2_LARGE_DIR (build/gpt2-large), GPT2_LARGE_NEW (16), GPT2_BENCH_THREADS (2),
#      GPT2_LARGE_FORMATS (q4 int8), GPT2_LARGE_KEEP=1 keeps the fp32 files, PYTHON (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-$ROOT/build/native}
DIR=${GPT2_LARGE_DIR:-$ROOT/build/gpt2-large}
NEW=${GPT2_LARGE_NEW:-16}
THREADS=${GPT2_BENCH_THREADS:-2}
FORMATS=${GPT2_LARGE_FORMATS:-q4 int8}
PYTHON=${PYTHON:-/usr/bin/python3}
QKV=$BUILD_DIR/cpp/tools/qkv
mkdir -p "$DIR"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
  "qkv commit $(git rev-parse --short HEAD 2> /dev/null || echo '?'); Node $(node --version); threads $THREADS;" \
  "free disk $(df -h --output=avail "$DIR" | tail -1 | tr -d ' ')"

need_f32=0
for f in $FORMATS; do [[ -f "$DIR/large_$f.safetensors" ]] || need_f32=1; done
if [[ $need_f32 == 1 ]]; then
  if [[ ! -f "$DIR/large_f32.safetensors" ]]; then
    [[ -f "$DIR/hub/model.safetensors" ]] || "$PYTHON" bench/gpt2_export.py "$DIR" --shape large --hub-only
    /usr/bin/time -f "qkv import: %e s, peak RSS %M kB" "$QKV" import "$DIR/hub" "$DIR/large_f32.safetensors" > /dev/null
  fi
  echo "== gpt2-large in fp32 in the package (fromPretrained of the Hub folder, load of the checkpoint)"
  [[ -d "$DIR/hub" ]] && node bench/gpt2_node.mjs refuse "$DIR/hub" 2>&1 | grep -E '^RESULT' | cut -c1-600
  node bench/gpt2_node.mjs refuse "$DIR/large_f32.safetensors" 2>&1 | grep -E '^RESULT' | cut -c1-600
  [[ ${GPT2_LARGE_KEEP:-0} == 1 ]] || rm -rf "$DIR/hub"
  for f in $FORMATS; do
    [[ -f "$DIR/large_$f.safetensors" ]] && continue
    /usr/bin/time -f "qkv quantize --weights $f: %e s, peak RSS %M kB" \
      "$QKV" quantize --weights "$f" "$DIR/large_f32.safetensors" "$DIR/large_$f.safetensors"
  done
  [[ ${GPT2_LARGE_KEEP:-0} == 1 ]] || rm -f "$DIR/large_f32.safetensors"
fi
ls -l "$DIR"/*.safetensors

common=(--threads "$THREADS" --runs 1 --prompt 32 --new "$NEW")
for f in $FORMATS; do
  echo "== gpt2-large $f: the package in Node (wasm), LanguageModel.load"
  node bench/gpt2_node.mjs wasm "$DIR/large_$f.safetensors" "${common[@]}" --label "large-wasm-$f" 2>&1 |
    grep -E '^(RESULT|run |qkv|gpt2_node|Error)' | cut -c1-400 || echo "run_gpt2_large: wasm $f failed"
  echo "== gpt2-large $f: natively, load_file"
  "$BUILD_DIR/bench/qkv_gpt2_bench" file "$DIR/large_$f.safetensors" "${common[@]}" --label "large-native-$f" 2>&1 |
    grep -E '^(RESULT|run |qkv)' | cut -c1-400 || echo "run_gpt2_large: native $f failed"
done

# gpt2-xl's shape (48 layers, 1600 wide, 1.56G parameters, 6.2 GB in fp32): config.json and a sparse file of the
# size its model.safetensors would have (the refusal must come before a byte of it is read).
XL=$DIR/xl-sparse
mkdir -p "$XL"
"$PYTHON" - "$XL" <<'PY'
import json, os, sys
sys.path.insert(0, "tests/fixtures")
import make_gpt2_fixtures as hf
L, C, V, P = 48, 1600, 50257, 1024
params = V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C
with open(os.path.join(sys.argv[1], "config.json"), "w") as f:
    json.dump(hf.hub_config(n_layer=L, n_head=25, n_embd=C, n_positions=P, vocab_size=V), f)
with open(os.path.join(sys.argv[1], "model.safetensors"), "wb") as f:
    f.truncate(8 + 4 * params)
print(f"gpt2-xl shape: {params} parameters, a sparse model.safetensors of {4 * params / 1e9:.2f} GB")
PY
echo "== gpt2-xl's shape in fp32 in the package (fromPretrained)"
node bench/gpt2_node.mjs refuse "$XL" 2>&1 | grep -E '^RESULT' | cut -c1-600
rm -rf "$XL"
