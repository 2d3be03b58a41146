#!/usr/bin/env bash
# The CPU-speed benchmarks (bench/README.md, "CPU speed"): peak FLOP/s, gemm vs OpenBLAS, training tokens/s vs
# PyTorch (char GPT and the tutorial Seq2Seq), the char GPT step in WebAssembly under Node vs native, and
# 1 -> n thread scaling. Builds what it needs, runs everything one process at a time, prints every table.
#
#   bench/run_cpu.sh                      # the full run (about 20 minutes on the 2-core machine)
#   CPU_BENCH_QUICK=1 bench/run_cpu.sh    # a fast smoke run: short loops, small batches (numbers not meaningful)
#
# Env: BUILD_DIR (build/native: the native Release preset; another folder is configured Release by hand),
#      CPU_BENCH_THREADS (the machine's cores: the comparisons run at this many, scaling from 1 to it),
#      CPU_BENCH_ONLY (any of "gemm char seq2seq wasm", default all), CPU_BENCH_SKIP_BUILD=1 (use what is built),
#      CPU_BENCH_ROUNDS (alternated runs per side of the char GPT and wasm comparisons, best kept; default 2),
#      CPU_BENCH_CHAR_STEPS (timed char GPT steps; default 200, and 100 for the wasm comparison),
#      CPU_BENCH_SEQ2SEQ_STEPS / CPU_BENCH_SEQ2SEQ_WARMUP (5 / 2),
#      CPU_BENCH_OPENBLAS_CORETYPE (OpenBLAS's kernel set for both peers; default unset = OpenBLAS's own choice
#      for this CPU, the strongest peer), PYTHON (/usr/bin/python3, Debian's python3-torch).
# Logs: $BUILD_DIR/bench-cpu/*.log; bench/cpu_report.py prints the comparison tables from them again.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-$ROOT/build/native}
QUICK=${CPU_BENCH_QUICK:-0}
ROUNDS=${CPU_BENCH_ROUNDS:-$([ "$QUICK" = 1 ] && echo 1 || echo 2)}
THREADS=${CPU_BENCH_THREADS:-$(nproc)}
ONLY=${CPU_BENCH_ONLY:-gemm char seq2seq wasm}
PYTHON=${PYTHON:-/usr/bin/python3}
LOGS=$BUILD_DIR/bench-cpu
BENCH=$BUILD_DIR/bench/qkv_bench

wants() { [[ " $ONLY " == *" $1 "* ]]; }
say() { printf '\n######## %s\n' "$*"; }

# ---- peers: Debian packages, installed when missing (benchmark-only dependencies) ----
missing=()
for p in libopenblas-dev libopenblas0-pthread python3-torch; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if [ -z "$sudo" ] || sudo -n true 2>/dev/null; then
    echo "run_cpu: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "run_cpu: missing ${missing[*]} and no root: those peers will be skipped"
  fi
fi
if [ -n "${CPU_BENCH_OPENBLAS_CORETYPE:-}" ]; then
  export OPENBLAS_CORETYPE=$CPU_BENCH_OPENBLAS_CORETYPE
else
  unset OPENBLAS_CORETYPE
fi

# ---- build (2 shared cores: -j2) ----
if [[ "${CPU_BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  if [ "$BUILD_DIR" = "$ROOT/build/native" ]; then
    cmake --preset native >/dev/null
  else
    cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$BUILD_DIR" --target qkv_bench -j2 >/dev/null
fi
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log

quick_flag=()
[ "$QUICK" = 1 ] && quick_flag=(--quick)
if [ "$QUICK" = 1 ]; then
  char_args=(--steps 20 --warmup 3)
  seq_args=(--steps 1 --warmup 1 --batch 8)
  wasm_args=(--steps 10 --warmup 2)
else
  char_args=(--steps "${CPU_BENCH_CHAR_STEPS:-200}" --warmup 10)
  seq_args=(--steps "${CPU_BENCH_SEQ2SEQ_STEPS:-5}" --warmup "${CPU_BENCH_SEQ2SEQ_WARMUP:-2}")
  wasm_args=(--steps "${CPU_BENCH_CHAR_STEPS:-100}" --warmup 10)
fi

say "machine"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; qkv commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared: timings are noisy)"
echo "mode: $([ "$QUICK" = 1 ] && echo 'QUICK (smoke run; numbers not meaningful)' || echo full), threads 1..$THREADS," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}"

if wants gemm; then
  say "1. peak FLOP/s and gemm vs OpenBLAS; 4. gemm thread scaling"
  "$BENCH" gemm --threads "$THREADS" "${quick_flag[@]}" | tee "$LOGS/gemm.log"
fi

# Each training run is its own process, so that each peak RSS is one model's alone.
# Runs alternate between the sides, ROUNDS times, and the report takes each side's best run: the machine's
# speed swings over seconds to minutes, and one run per side let those swings decide the ratio.
if wants char; then
  say "2a. char GPT training: qkv vs PyTorch, one process each, alternated, $ROUNDS rounds"
  for t in $(seq 1 "$THREADS"); do
    for r in $(seq 1 "$ROUNDS"); do
      "$BENCH" char-gpt --threads "$t" "${char_args[@]}" | tee "$LOGS/char-qkv-$t-$r.log"
      "$PYTHON" -u bench/train_torch.py char-gpt --threads "$t" "${char_args[@]}" | grep --line-buffered -v '^INFO  ' |
        tee "$LOGS/char-torch-$t-$r.log"
    done
  done
fi

if wants seq2seq; then
  say "2b. tutorial Seq2Seq training: qkv vs PyTorch at $THREADS threads"
  "$BENCH" seq2seq --threads "$THREADS" "${seq_args[@]}" | tee "$LOGS/seq2seq-qkv.log"
  "$PYTHON" -u bench/train_torch.py seq2seq --threads "$THREADS" "${seq_args[@]}" | grep --line-buffered -v '^INFO  ' |
    tee "$LOGS/seq2seq-torch.log"
fi

if wants wasm; then
  say "3. char GPT step: WebAssembly (Node, threaded) vs native, the package's configuration"
  wasm_threads=$((THREADS < 2 ? THREADS : 2))
  if [ ! -d node_modules ]; then
    echo "run_cpu: no node_modules (npm ci, or a symlink to a checkout's): the wasm benchmark is skipped"
  else
    if [[ "${CPU_BENCH_SKIP_BUILD:-0}" != 1 ]]; then
      bash scripts/build-wasm.sh >/dev/null
      npm run --silent build:web >/dev/null
    fi
    # The relaxed-SIMD build: Node 22+ runs it as is, Node 20 behind V8's flag.
    relaxed_flag=()
    (( $(node -p 'process.versions.node.split(".")[0]') < 22 )) && relaxed_flag=(--experimental-wasm-relaxed-simd)
    # What each side can do at best (the report's "% of peak"): native's vector FMA loop per instruction set
    # (already in gemm.log when the gemm tables ran) and WebAssembly's 4-lane multiply-add loop.
    if ! wants gemm; then
      "$BENCH" peak --threads "$wasm_threads" "${quick_flag[@]}" | tee "$LOGS/wasm-peak-native.log"
    fi
    node "${relaxed_flag[@]}" bench/wasm_peak.mjs --threads "$wasm_threads" | tee "$LOGS/wasm-peak-node.log"
    for r in $(seq 1 "$ROUNDS"); do
      "$BENCH" char-gpt --config package --threads "$wasm_threads" "${wasm_args[@]}" | tee "$LOGS/wasm-native-$r.log"
      "$BENCH" char-gpt --config package --threads "$wasm_threads" --isa sse4.1 "${wasm_args[@]}" |
        tee "$LOGS/wasm-native-sse41-$r.log"
      node bench/wasm_char_gpt.mjs --threads "$wasm_threads" --relaxed 0 "${wasm_args[@]}" | tee "$LOGS/wasm-node-$r.log"
      node "${relaxed_flag[@]}" bench/wasm_char_gpt.mjs --threads "$wasm_threads" --relaxed 1 "${wasm_args[@]}" |
        tee "$LOGS/wasm-node-relaxed-$r.log"
    done
  fi
fi

# The gemm benchmark prints its own tables; the summary compares the training runs, when there are any.
if wants char || wants seq2seq || wants wasm; then
  say "summary: the comparisons (bench/cpu_report.py $LOGS)"
  "$PYTHON" bench/cpu_report.py "$LOGS"
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
