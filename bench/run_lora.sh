#!/usr/bin/env bash
# The LoRA benchmark of issue 37 (bench/README.md, "LoRA"): GPT-2 124M's shape, rank 8 on qkv, out, up and down,
# sequence 128, batch 8, at 2 threads: LoRA (float32 base, and q4 base) against full fine-tuning, natively
# (qkv_bench lora), in WebAssembly under Node (bench/lora_node.mjs) and in PyTorch 1.13 (bench/lora.py) on the
# same machine in the same run, each mode in its own process (so that each peak RSS is that mode's alone), LoRA
# also without activation recomputation (qkv recomputes with adapters by default; "% of peak" counts the model FLOP,
# not the recomputed forward); then bench/lora_report.py prints the table: tokens/s, LoRA / full, % of peak,
# x PyTorch, peak memory / weights.
#
#   bench/run_lora.sh                        # the full run
#   LORA_BENCH_LAYERS=2 LORA_BENCH_STEPS=1 bench/run_lora.sh   # a smoke run (numbers not GPT-2's)
#
# Env: BUILD_DIR (build/native), LORA_BENCH_THREADS (2), LORA_BENCH_STEPS (3 timed steps, after 1 warm-up),
#      LORA_BENCH_LAYERS (12), LORA_BENCH_ONLY (any of "native torch wasm", default all),
#      LORA_BENCH_SKIP_BUILD=1 (use what is built), PYTHON (/usr/bin/python3, Debian's python3-torch).
# Logs: $BUILD_DIR/bench-lora/*.log; `bench/lora_report.py $BUILD_DIR/bench-lora` prints the table again.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-$ROOT/build/native}
THREADS=${LORA_BENCH_THREADS:-2}
STEPS=${LORA_BENCH_STEPS:-3}
LAYERS=${LORA_BENCH_LAYERS:-12}
ONLY=${LORA_BENCH_ONLY:-native torch wasm}
PYTHON=${PYTHON:-/usr/bin/python3}
LOGS=$BUILD_DIR/bench-lora
BENCH=$BUILD_DIR/bench/qkv_bench
args=(--threads "$THREADS" --steps "$STEPS" --warmup 1 --batch 8 --layers "$LAYERS")

wants() { [[ " $ONLY " == *" $1 "* ]]; }
say() { printf '\n######## %s\n' "$*"; }

# PyTorch's peer BLAS: Debian's torch takes its products from the system BLAS, OpenBLAS when installed (TOOLCHAIN.md).
if wants torch && ! dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "install ok installed"; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0-pthread >/dev/null
  else
    echo "run_lora: libopenblas0-pthread is missing (apt-get install it): PyTorch runs on the reference BLAS"
  fi
fi

if [[ "${LORA_BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  if wants native; then
    cmake --preset native >/dev/null
    cmake --build "$BUILD_DIR" --target qkv_bench -j2 >/dev/null
  fi
  if wants wasm; then
    bash scripts/build-wasm.sh >/dev/null
    npm run --silent build:web >/dev/null
  fi
fi
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log

say "machine"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; qkv commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (the machine may be shared: timings are noisy)"
echo "GPT-2 124M shape, $LAYERS layers, batch 8 x 128, $THREADS threads, $STEPS timed steps after 1 warm-up"

for mode in full lora lora-q4; do
  if wants native; then
    say "native qkv, $mode"
    "$BENCH" lora --mode "$mode" "${args[@]}" | tee "$LOGS/native-$mode.log"
    if [ "$mode" = lora ]; then  # keeping the activations: the step's FLOP are the model FLOP (the % of peak target)
      say "native qkv, $mode, recompute off"
      "$BENCH" lora --mode "$mode" "${args[@]}" --recompute off | tee "$LOGS/native-$mode-off.log"
    fi
  fi
  if wants torch && [ "$mode" != lora-q4 ]; then
    say "PyTorch, $mode"
    "$PYTHON" -u bench/lora.py --mode "$mode" "${args[@]}" | tee "$LOGS/torch-$mode.log"
  fi
done

if wants wasm; then
  if [ ! -f web/dist/node.js ]; then
    echo "run_lora: no web/dist/node.js (bash scripts/build-wasm.sh && npm run build:web): the wasm runs are skipped"
  else
    say "wasm peak (bench/wasm_peak.mjs)"
    node bench/wasm_peak.mjs --threads "$THREADS" | tee "$LOGS/wasm-peak.log"
    peak=$(sed -n "s/^RESULT bench=wasm-peak variant=plain threads=$THREADS gflops=\([0-9.]*\).*/\1/p" "$LOGS/wasm-peak.log")
    for mode in full lora lora-q4; do
      say "wasm qkv (Node), $mode"
      node bench/lora_node.mjs --mode "$mode" "${args[@]}" --peak-gflops "${peak:-0}" | tee "$LOGS/wasm-$mode.log"
    done
    say "wasm qkv (Node), lora, recompute off"
    node bench/lora_node.mjs --mode lora "${args[@]}" --peak-gflops "${peak:-0}" --recompute off |
      tee "$LOGS/wasm-lora-off.log"
  fi
fi

say "summary (bench/lora_report.py $LOGS)"
"$PYTHON" bench/lora_report.py "$LOGS"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
