#!/usr/bin/env bash
# Generation speed (issue: KV cache): tokens/s generating 256 tokens at batch 1 after a 1-token prompt on the
# char GPT at context 256, with and without qkv's KV cache, natively and in WebAssembly under Node, beside
# PyTorch's nanoGPT `generate` loop (no cache). One process at a time; prints each table and a summary.
#
#   bench/run_generate.sh                    # about 3 minutes on the 2-core machine
#
# Env: BUILD_DIR (build/native), GEN_BENCH_THREADS (default: the machine's cores, at most 2 for wasm),
#      GEN_BENCH_SKIP_BUILD=1 (use what is built), PYTHON (/usr/bin/python3 with Debian's python3-torch).
# Logs: $BUILD_DIR/bench-generate/*.log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-$ROOT/build/native}
THREADS=${GEN_BENCH_THREADS:-$(nproc)}
PYTHON=${PYTHON:-/usr/bin/python3}
LOGS=$BUILD_DIR/bench-generate

for p in libopenblas0-pthread python3-torch; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "run_generate: installing $p (the PyTorch peer)"
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$p" >/dev/null
  fi
done
unset OPENBLAS_CORETYPE

if [[ "${GEN_BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  cmake --preset native >/dev/null
  cmake --build "$BUILD_DIR" --target qkv_bench -j2 >/dev/null
  bash scripts/build-wasm.sh >/dev/null
  npm run --silent build:web >/dev/null
fi
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
  "qkv commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$BUILD_DIR/bench/qkv_bench" generate --threads "$THREADS" | tee "$LOGS/native.log"
wasm_threads=$((THREADS < 2 ? THREADS : 2))
node bench/wasm_generate.mjs --threads "$wasm_threads" | tee "$LOGS/wasm.log"
"$PYTHON" -u bench/train_torch.py generate --threads "$THREADS" | grep --line-buffered -v '^INFO  ' |
  tee "$LOGS/torch.log"

# The summary: every side's tokens/s from the RESULT lines, and the ratios the issue names.
"$PYTHON" - "$LOGS" <<'PY'
import re, sys, pathlib
rows = {}
for log in sorted(pathlib.Path(sys.argv[1]).glob("*.log")):
    for line in log.read_text().splitlines():
        if line.startswith("RESULT bench=generate "):
            kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
            rows[(kv["side"], kv["cache"])] = (float(kv["tokens_per_s"]), kv["threads"])
print("\n== generation summary: 256 tokens, batch 1, char GPT at context 256")
print(f"{'side':10} {'cache':6} {'threads':8} {'tokens/s':>10} {'vs PyTorch':>11}")
torch = rows.get(("PyTorch", "off"), (float("nan"), "?"))[0]
for (side, cache), (tps, threads) in rows.items():
    print(f"{side:10} {cache:6} {threads:8} {tps:>10.0f} {tps / torch:>10.1f}x")
for side in ("qkv", "wasm"):
    on, off = rows.get((side, "on")), rows.get((side, "off"))
    if on and off:
        ratio = on[0] / off[0]
        print(f"{side} with / without the cache: {ratio:.1f}x (target >= 10x: {'PASS' if ratio >= 10 else 'FAIL'})")
PY
