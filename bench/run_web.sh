#!/usr/bin/env bash
# qkv's npm package in Node vs TensorFlow.js and ONNX Runtime Web (bench/README.md, "JavaScript peers"):
# the char GPT training step vs TF.js, batch-1 forward latency vs ORT web, and download sizes.
#
#   bench/run_web.sh                                  # everything: builds, installs the peers, exports, runs, tables
#   WEB_BENCH_ONLY="latency size" bench/run_web.sh    # some of: train latency size
#   WEB_BENCH_SKIP_BUILD=1 bench/run_web.sh           # reuse web/dist (and the export when it is there)
#   WEB_BENCH_REPORT_ONLY=1 bench/run_web.sh          # print the tables again from the last run's logs
#
# Env: WEB_BENCH_THREADS (the machine's cores), WEB_BENCH_TRAIN_WARMUP / WEB_BENCH_TRAIN_STEPS (5 / 50),
#      WEB_BENCH_TFJS_CPU_STEPS (3, after 1 warm-up; 0 skips TF.js's plain cpu backend, ~25 s a step),
#      WEB_BENCH_TFJS_FLAGS_STEPS (0: skipped; N times TF.js wasm with tf.matMul's transpose flags, its slow path),
#      WEB_BENCH_LATENCY_WARMUP / WEB_BENCH_LATENCY_RUNS (20 / 200), WEB_BENCH_LATENCY_THREADS (the thread
#      counts of the latency runs: WEB_BENCH_THREADS; e.g. "1 2"), WEB_BENCH_ROUNDS (3: qkv and ORT
#      alternate, each in its own process), WEB_BENCH_DATA (../shared/data/tinyshakespeare.txt),
#      PYTHON (/usr/bin/python3: Debian's python3-torch), OUT (build/bench-web).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/build/bench-web}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${WEB_BENCH_THREADS:-$(nproc)}
ONLY=${WEB_BENCH_ONLY:-train latency size}
DATA=${WEB_BENCH_DATA:-$ROOT/../shared/data/tinyshakespeare.txt}
TRAIN_WARMUP=${WEB_BENCH_TRAIN_WARMUP:-5}
TRAIN_STEPS=${WEB_BENCH_TRAIN_STEPS:-50}
TFJS_CPU_STEPS=${WEB_BENCH_TFJS_CPU_STEPS:-3}
LAT_WARMUP=${WEB_BENCH_LATENCY_WARMUP:-20}
LAT_RUNS=${WEB_BENCH_LATENCY_RUNS:-200}
LAT_THREADS=${WEB_BENCH_LATENCY_THREADS:-$THREADS}
ROUNDS=${WEB_BENCH_ROUNDS:-3}
want() { [[ " $ONLY " == *" $1 "* ]]; }

if [[ "${WEB_BENCH_REPORT_ONLY:-0}" == 1 ]]; then
  exec node bench/web/report.mjs --dir "$OUT"
fi

as_root() { if [[ $(id -u) == 0 ]]; then "$@"; elif command -v sudo > /dev/null; then sudo "$@"; else return 1; fi; }

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== threads $THREADS; Node $(node --version); out $OUT"

# 1. qkv: the WebAssembly builds and the package (web/dist), as a user of the package gets them.
if [[ "${WEB_BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  [[ -x node_modules/.bin/tsc && -x node_modules/.bin/esbuild ]] || npm ci --no-audit --no-fund
  echo "== building the WebAssembly core (scripts/build-wasm.sh) and the package (npm run build:web)"
  bash scripts/build-wasm.sh > /dev/null
  npm run --silent build:web
fi

# 2. The peers, from bench/web's own package.json and lock file (never the package's: npm test must not get them).
if [[ ! -f bench/web/node_modules/.package-lock.json || bench/web/package-lock.json -nt bench/web/node_modules/.package-lock.json ]]; then
  echo "== installing the peers: npm ci --prefix bench/web"
  # onnxruntime-node (bench/run_gpt2.sh's peer) would fetch CUDA binaries from api.nuget.org: its CPU binaries are
  # in the npm package, so the install script is told to skip (also set in bench/web/.npmrc).
  ONNXRUNTIME_NODE_INSTALL=skip npm ci --prefix bench/web --no-audit --no-fund --loglevel=error
fi

# 3. The shared weights, ONNX exports, reference logits, batches and PyTorch's losses (bench/web/export_model.py).
if ! "$PYTHON" -c "import torch, onnx" 2> /dev/null; then
  echo "== installing python3-torch python3-onnx (Debian; for the export only)"
  as_root apt-get install -y python3-torch python3-onnx > /dev/null ||
    { as_root apt-get update > /dev/null && as_root apt-get install -y python3-torch python3-onnx > /dev/null; } ||
    { echo "cannot install python3-torch python3-onnx (not root and no sudo): install them, or set PYTHON" >&2; exit 1; }
fi
if [[ "${WEB_BENCH_SKIP_BUILD:-0}" != 1 || ! -f "$OUT/reference.safetensors" ]]; then
  echo "== exporting the char GPT from PyTorch ($PYTHON bench/web/export_model.py)"
  CHAR_GPT_THREADS=$THREADS "$PYTHON" bench/web/export_model.py "$OUT" --data "$DATA" --steps 50 2>&1 | grep -v -i warning
fi

mkdir -p "$OUT/logs"
# One benchmark process; its output goes to the terminal (without the RESULT lines) and to OUT/logs/NAME.log.
run() {
  local name=$1
  shift
  node "$@" > "$OUT/logs/$name.log" 2>&1 || echo "(exit status $?; see $OUT/logs/$name.log)" >> "$OUT/logs/$name.log"
  grep -v '^RESULT' "$OUT/logs/$name.log" | grep -v -e '^ *$' -e 'tfjs-node' -e '^=*$' -e '^Hi, looks like' || true
}

if want train; then
  rm -f "$OUT"/logs/1*-train-*.log
  common=(--warmup "$TRAIN_WARMUP" --steps "$TRAIN_STEPS" --dir "$OUT")
  run 10-train-qkv bench/web/train.mjs --side qkv --threads "$THREADS" "${common[@]}"
  [[ "$THREADS" == 1 ]] || run 11-train-qkv-1thread bench/web/train.mjs --side qkv --threads 1 "${common[@]}"
  run 12-train-tfjs-wasm bench/web/train.mjs --side tfjs-wasm --threads "$THREADS" "${common[@]}"
  if [[ "${WEB_BENCH_TFJS_FLAGS_STEPS:-0}" != 0 ]]; then
    run 14-train-tfjs-wasm-flags bench/web/train.mjs --side tfjs-wasm --matmul flags --warmup 1 --steps "$WEB_BENCH_TFJS_FLAGS_STEPS" --dir "$OUT"
  fi
  if [[ "$TFJS_CPU_STEPS" != 0 ]]; then
    run 13-train-tfjs-cpu bench/web/train.mjs --side tfjs-cpu --warmup 1 --steps "$TFJS_CPU_STEPS" --dir "$OUT"
  fi
fi

if want latency; then
  rm -f "$OUT"/logs/2*-latency-*.log "$OUT"/logits_*.f32
  for seq in 64 1; do
    for threads in $LAT_THREADS; do
      for round in $(seq "$ROUNDS"); do
        for side in qkv ort; do
          run "2$([[ $seq == 64 ]] && echo 0 || echo 1)-latency-t$seq-thr$threads-$round-$side" bench/web/latency.mjs --side "$side" \
            --seq "$seq" --threads "$threads" --warmup "$LAT_WARMUP" --runs "$LAT_RUNS" --dir "$OUT"
        done
      done
    done
  done
fi

if want size; then
  rm -f "$OUT"/logs/30-size.log
  run 30-size bench/web/sizes.mjs --dir "$OUT"
fi

node bench/web/report.mjs --dir "$OUT"
