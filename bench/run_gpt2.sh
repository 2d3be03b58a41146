#!/usr/bin/env bash
# GPT-2 124M generation (issue 35, "Speed and memory"): batch 1, a 32-token prompt, 64 new tokens greedy, KV
# cache on every side, 2 threads; decode ms/token, prefill ms, load s and peak resident memory of
#   qkv natively          load_pretrained(Hub folder), and load_file of the `qkv import`ed checkpoint (qkv_gpt2_bench)
#   qkv in Node (wasm)    the npm package: LanguageModel.fromPretrained of the Hub folder (bench/gpt2_node.mjs wasm)
#   onnxruntime-web       1.30, wasm backend in Node, env.wasm.numThreads 2 (bench/gpt2_node.mjs ort-web)
#   onnxruntime-node      1.30, CPU execution provider, intraOpNumThreads 2 (bench/gpt2_node.mjs ort-node)
# on the same random weights (bench/gpt2_export.py: the Hub folder and its ONNX export with a KV cache). Each side
# runs in its own process, one after the other, GPT2_BENCH_ROUNDS times in turn; every side's greedy tokens are
# checked against PyTorch's (expected.json). Prints the RESULT lines, then the table (best round of each side, and
# the range over rounds) and each qkv side's ratio to its peer.
#
#   bench/run_gpt2.sh                       # builds, installs the peers, exports once (~2 min), then the rounds
#   GPT2_BENCH_ONLY="native wasm" bench/run_gpt2.sh      # some of: native file wasm ort-web ort-node alternate
#
# "alternate" (last) loads the three JavaScript sides into one Node process and runs one generation of each in turn,
# GPT2_BENCH_ALT_RUNS times: on a shared machine whose speed swings over minutes, the ratio of two sides measured in
# the same seconds is steadier than the ratio of their separate processes' bests (the report prints both).
#
# Quantized weights (issue 36): GPT2_BENCH_QUANT=1 runs the quantized sides instead (the same loop, the same 64
# tokens; bench/README.md "Quantized GPT-2 decoding"):
#   bandwidth             qkv_gpt2_bench bandwidth: the streaming read bandwidth at the same threads, each round
#                         (and each native-<f> process measures it again right after its generations: its floor)
#   native-<f>            qkv_gpt2_bench file gpt2_<f>.safetensors: `qkv quantize --weights <f>` of the imported
#                         checkpoint (native-f32 = the imported checkpoint itself), f in f32 f16 bf16 int8 q4, and
#                         int8a8 q4a8: the same weights with `--activations int8` (integer dot products while decoding)
#   wasm-<f>              the package's LanguageModel.load of the same file (bench/gpt2_node.mjs wasm FILE)
#   ort-web-<q>, ort-node-<q>   the peers on gpt2_<q>.onnx (bench/gpt2_quantize_onnx.py: q8 = MatMulInteger, as
#                         Transformers.js's q8 models; q4 = MatMulNBits 4-bit, block 32; q8nbits = MatMulNBits 8-bit)
#   alternate             GPT2_BENCH_ALT_SIDES (wasm-f32,wasm-int8,wasm-q4,ort-web,ort-web-q8) in one process
# and prints the format table: decode per format, its ratio to fp32 in the same engine, each native format against
# its bandwidth floor (weight bytes + the KV cache read per step / the measured read bandwidth), the resident weights
# and peak RSS, the package's 8-bit decode against onnxruntime-web's.
#
# Env: BUILD_DIR (build/native), GPT2_BENCH_DIR (build/gpt2: the weights, ~1.8 GB), GPT2_BENCH_THREADS (2),
#      GPT2_BENCH_ROUNDS (3), GPT2_BENCH_RUNS (3 generations per process after one load), GPT2_BENCH_ALT_RUNS (6),
#      GPT2_BENCH_SKIP_BUILD=1, GPT2_BENCH_REPORT_ONLY=1 (the table again from the last run's logs, $DIR/logs),
#      PYTHON (/usr/bin/python3: Debian's python3-torch and python3-onnx, for the export only).
# onnxruntime-node's install script fetches CUDA binaries from api.nuget.org; the CPU binaries this needs are in the
# npm package itself, so the peers are installed with ONNXRUNTIME_NODE_INSTALL=skip (npm's registry only).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-$ROOT/build/native}
DIR=${GPT2_BENCH_DIR:-$ROOT/build/gpt2}
THREADS=${GPT2_BENCH_THREADS:-2}
ROUNDS=${GPT2_BENCH_ROUNDS:-3}
RUNS=${GPT2_BENCH_RUNS:-3}
QUANT=${GPT2_BENCH_QUANT:-0}
if [[ $QUANT == 1 ]]; then
  ONLY=${GPT2_BENCH_ONLY:-bandwidth native-f32 native-f16 native-int8 native-q4 native-int8a8 native-q4a8 wasm-f32 wasm-f16 wasm-int8 wasm-q4 wasm-int8a8 wasm-q4a8 ort-web ort-web-q8 ort-web-q4 ort-node ort-node-q8 ort-node-q4 alternate}
  ALT_SIDES=${GPT2_BENCH_ALT_SIDES:-wasm-f32,wasm-int8,wasm-q4,wasm-int8a8,wasm-q4a8,ort-web,ort-web-q8}
else
  ONLY=${GPT2_BENCH_ONLY:-native file wasm ort-web ort-node alternate}
  ALT_SIDES=${GPT2_BENCH_ALT_SIDES:-wasm,ort-web,ort-node}
fi
ALT_RUNS=${GPT2_BENCH_ALT_RUNS:-6}
PYTHON=${PYTHON:-/usr/bin/python3}
LOGS=$DIR/logs
want() { [[ " $ONLY " == *" $1 "* ]]; }
as_root() { if [[ $(id -u) == 0 ]]; then "$@"; elif command -v sudo > /dev/null; then sudo "$@"; else return 1; fi; }

report_only=${GPT2_BENCH_REPORT_ONLY:-0}
[[ $report_only == 1 ]] && ONLY=report  # no side runs; the logs stay
if [[ "${GPT2_BENCH_SKIP_BUILD:-0}" != 1 && $report_only != 1 ]]; then
  cmake --preset native > /dev/null
  cmake --build "$BUILD_DIR" -j 2 --target qkv_gpt2_bench qkv > /dev/null
  if want wasm || [[ "$ONLY $ALT_SIDES" == *wasm-* ]]; then
    [[ -x node_modules/.bin/tsc ]] || npm ci --no-audit --no-fund
    bash scripts/build-wasm.sh > /dev/null
    npm run --silent build:web
  fi
fi
if [[ "$ONLY $ALT_SIDES" == *ort-* ]]; then
  if [[ ! -f bench/web/node_modules/.package-lock.json || bench/web/package-lock.json -nt bench/web/node_modules/.package-lock.json ]]; then
    ONNXRUNTIME_NODE_INSTALL=skip npm ci --prefix bench/web --no-audit --no-fund --loglevel=error
  fi
fi
mkdir -p "$DIR" "$LOGS"
if [[ $report_only != 1 && ( ! -f "$DIR/gpt2.onnx" || ! -f "$DIR/hub/model.safetensors" || ! -f "$DIR/expected.json" ) ]]; then
  if ! "$PYTHON" -c "import torch, onnx" 2> /dev/null; then
    as_root apt-get install -y python3-torch python3-onnx > /dev/null || { echo "run_gpt2: needs python3-torch python3-onnx" >&2; exit 1; }
  fi
  echo "== exporting the weights (bench/gpt2_export.py $DIR)"
  "$PYTHON" bench/gpt2_export.py "$DIR"
fi
if [[ "$ONLY $ALT_SIDES" =~ (file|native-|wasm-) && ! -f "$DIR/imported.safetensors" ]]; then
  "$BUILD_DIR/cpp/tools/qkv" import "$DIR/hub" "$DIR/imported.safetensors" > /dev/null
fi
# The quantized files the chosen sides read, made once: qkv's checkpoints by `qkv quantize` (again when the formats'
# definition, cpp/src/ops/weight_format.h, is newer than the file: a layout change), the peers' exports by
# bench/gpt2_quantize_onnx.py (each format's name is the side's suffix).
if [[ $report_only != 1 ]]; then
  for side in $ONLY ${ALT_SIDES//,/ }; do
    case $side in
      native-f32 | wasm-f32) ;;
      native-* | wasm-*)
        f=${side#*-}
        if [[ ! -f "$DIR/gpt2_$f.safetensors" || cpp/src/ops/weight_format.h -nt "$DIR/gpt2_$f.safetensors" ]]; then
          echo "== qkv quantize --weights ${f%a8}$([[ $f == *a8 ]] && echo ' --activations int8') (gpt2_$f.safetensors)"
          "$BUILD_DIR/cpp/tools/qkv" quantize --weights "${f%a8}" $([[ $f == *a8 ]] && echo --activations int8) \
            "$DIR/imported.safetensors" "$DIR/gpt2_$f.safetensors" ||
            echo "run_gpt2: qkv quantize --weights $f failed: the $side side will fail"
        fi ;;
      ort-web-* | ort-node-*)
        q=${side#ort-*-}
        if [[ ! -f "$DIR/gpt2_$q.onnx" ]]; then
          echo "== bench/gpt2_quantize_onnx.py --weights $q (gpt2_$q.onnx)"
          "$PYTHON" bench/gpt2_quantize_onnx.py "$DIR/gpt2.onnx" "$DIR/gpt2_$q.onnx" --weights "${q%a4}" \
            $([[ $q == *a4 ]] && echo --accuracy-level 4)
        fi ;;
    esac
  done
fi

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
  "qkv commit $(git rev-parse --short HEAD 2> /dev/null || echo '?'); Node $(node --version); threads $THREADS"
[[ $report_only == 1 ]] || rm -f "$LOGS"/*.log
common=(--threads "$THREADS" --runs "$RUNS" --prompt 32 --new 64)
for round in $(seq "$ROUNDS"); do
  for side in $ONLY; do
    [[ $side == alternate || $side == report ]] && continue
    echo "== round $round: $side (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    ckpt() { [[ $1 == f32 ]] && echo "$DIR/imported.safetensors" || echo "$DIR/gpt2_$1.safetensors"; }
    case $side in
      native) cmd=("$BUILD_DIR/bench/qkv_gpt2_bench" pretrained "$DIR/hub" "${common[@]}") ;;
      file) cmd=("$BUILD_DIR/bench/qkv_gpt2_bench" file "$DIR/imported.safetensors" "${common[@]}") ;;
      bandwidth) cmd=("$BUILD_DIR/bench/qkv_gpt2_bench" bandwidth --threads "$THREADS") ;;
      native-*) cmd=("$BUILD_DIR/bench/qkv_gpt2_bench" file "$(ckpt "${side#native-}")" "${common[@]}" --label "$side"
        --bandwidth-mb 512) ;;
      wasm) cmd=(node bench/gpt2_node.mjs wasm "$DIR/hub" "${common[@]}") ;;
      wasm-*) cmd=(node bench/gpt2_node.mjs wasm "$(ckpt "${side#wasm-}")" "${common[@]}" --label "$side") ;;
      ort-web | ort-node) cmd=(node bench/gpt2_node.mjs "$side" "$DIR/gpt2.onnx" "${common[@]}") ;;
      # onnxruntime-web's MatMulNBits decodes at about 1 s/token here: one generation per process.
      ort-web-q4* | ort-node-q4* | ort-web-q8nbits* | ort-node-q8nbits*)
        cmd=(node bench/gpt2_node.mjs "${side%-*}" "$DIR/gpt2_${side#ort-*-}.onnx" --threads "$THREADS" --runs 1
          --prompt 32 --new 64 --label "$side") ;;
      ort-web-* | ort-node-*)
        cmd=(node bench/gpt2_node.mjs "${side%-*}" "$DIR/gpt2_${side#ort-*-}.onnx" "${common[@]}" --label "$side") ;;
      *) echo "run_gpt2: unknown side $side" >&2; exit 2 ;;
    esac
    "${cmd[@]}" 2>&1 | tee "$LOGS/$side.$round.log" | grep -E '^(RESULT|run |qkv_gpt2_bench|gpt2_node)' | cut -c1-200 ||
      echo "run_gpt2: $side failed (its log: $LOGS/$side.$round.log)"
  done
done

if want alternate; then
  echo "== the JavaScript sides in one process, alternated (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  node bench/gpt2_node.mjs alternate "$DIR" --sides "$ALT_SIDES" --threads "$THREADS" --runs "$ALT_RUNS" --prompt 32 --new 64 2>&1 |
    tee "$LOGS/alternate.log" | grep -E '^(RESULT|round )' | cut -c1-250 ||
    echo "run_gpt2: the alternated process failed (its log: $LOGS/alternate.log)"
fi

if [[ $QUANT == 1 ]]; then
  exec "$PYTHON" bench/gpt2_quant_report.py "$LOGS" "$DIR/expected.json"
fi
"$PYTHON" - "$LOGS" "$DIR/expected.json" <<'PY'
import json, pathlib, re, sys
logs, expected = pathlib.Path(sys.argv[1]), json.load(open(sys.argv[2]))["greedy"]
names = {"native": "qkv natively, load_pretrained(Hub folder)", "file": "qkv natively, load_file(qkv import)",
         "wasm": "qkv package in Node (wasm), fromPretrained", "ort-web": "onnxruntime-web in Node (wasm)",
         "ort-node": "onnxruntime-node (CPU EP)"}
rows = {}
for log in sorted(logs.glob("*.log")):
    for line in log.read_text().splitlines():
        if line.startswith("RESULT side=") and not line.startswith(("RESULT side=alt", "RESULT side=alt-ratio")):
            kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
            rows.setdefault({"pretrained": "native"}.get(kv["side"], kv["side"]), []).append(kv)
if not rows:
    sys.exit("no RESULT lines")
print("\n== GPT-2 124M, batch 1, prompt 32, 64 new tokens greedy, KV cache: each side's best process (its worst)")
print("| side | decode ms/token | decode tokens/s | prefill ms (with the 1st token) | 1st generation's prefill ms |"
      " load s | peak RSS MB | tokens = PyTorch's |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
best = {}
for side in ["native", "file", "wasm", "ort-web", "ort-node"]:
    if side not in rows:
        continue
    rs = rows[side]
    col = lambda k: sorted(float(r[k]) for r in rs)
    d, p, l, m, f = col("decode_ms"), col("prefill_ms"), col("load_s"), col("peak_rss_mb"), col("first_prefill_ms")
    same = all([int(t) for t in r["tokens"].split(",")] == expected for r in rs)
    best[side] = (d[0], p[0], l[0], m[-1])
    def rng(v, f):
        return f.format(v[0]) if len(v) == 1 else f"{f.format(v[0])} (to {f.format(v[-1])})"
    print(f"| {names[side]} | {rng(d, '{:.2f}')} | {1e3 / d[0]:.1f} | {rng(p, '{:.0f}')} | {rng(f, '{:.0f}')} | "
          f"{rng(l, '{:.2f}')} | "
          f"{m[-1]:.0f} | {'yes' if same else 'NO'} |")
    if not same:
        print(f"  {side}: tokens differ from PyTorch's: {rs[0]['tokens'][:120]}...")
print("\nratios (each qkv side / its peer; decode as tokens/s, prefill and load as the peer's time / qkv's):")
for q, peer, target in [("wasm", "ort-web", 1.5), ("native", "ort-node", 1.0), ("file", "ort-node", 1.0)]:
    if q in best and peer in best:
        (qd, qp, ql, qm), (pd, pp, pl, pm) = best[q], best[peer]
        print(f"  {q} vs {peer}: decode {pd / qd:.2f}x (target >= {target}x: {'PASS' if pd / qd >= target else 'FAIL'}),"
              f" prefill {pp / qp:.2f}x, load {pl / ql:.2f}x, peak RSS {qm / pm:.2f}x the peer's")
for log in logs.glob("alternate.log"):
    for line in log.read_text().splitlines():
        if line.startswith("RESULT side=alt-pair"):
            kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
            r = float(kv["decode_median"])
            target = " target >= 1.5x: " + ("PASS" if r >= 1.5 else "FAIL") + ";" if (kv["a"], kv["b"]) == ("wasm", "ort-web") else ""
            print(f"  alternated in one process: {kv['a']} vs {kv['b']} decode {r:.2f}x (median of rounds; range "
                  f"{kv['range']};{target} prefill {kv['prefill_median']}x)")
        elif line.startswith("RESULT side=alt-"):
            kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
            same = [int(t) for t in kv["tokens"].split(",")] == expected
            print(f"  alternated: {kv['side'][4:]:8} decode {kv['decode_ms']} ms/token best round, "
                  f"{kv['decode_ms_median_of_runs']} median of rounds; prefill {kv['prefill_ms']} ms;"
                  f" tokens = PyTorch's: {'yes' if same else 'NO'}")
if "wasm" in best and "ort-web" in best:
    print(f"  wasm prefill no slower than ort-web: {'PASS' if best['wasm'][1] <= best['ort-web'][1] else 'FAIL'};"
          f" wasm load no slower than ort-web: {'PASS' if best['wasm'][2] <= best['ort-web'][2] else 'FAIL'}")
PY
