#!/usr/bin/env bash
# Char-level GPT, qkv vs PyTorch: nanoGPT's CPU recipe on tinyshakespeare with identical initialisation,
# batches and learning-rate schedule (bench/README.md, "Char-level GPT vs PyTorch").
#
#   bench/run_char_gpt.sh                      # the full run: 2000 steps each (15-30 minutes on 2 cores)
#   CHAR_GPT_STEPS=200 bench/run_char_gpt.sh   # a short trial (the schedule still ends at step 2000)
#   CHAR_GPT_REPORT_ONLY=1 bench/run_char_gpt.sh  # print the tables again from the last run's logs
#
# Env: CHAR_GPT_STEPS (2000), CHAR_GPT_THREADS (2), CHAR_GPT_DATA (../shared/data/tinyshakespeare.txt),
#      BUILD (build/bench), PYTHON (/usr/bin/python3: Debian's python3-torch), CHAR_GPT_SKIP_BUILD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STEPS=${CHAR_GPT_STEPS:-2000}
export CHAR_GPT_THREADS=${CHAR_GPT_THREADS:-2}
DATA=${CHAR_GPT_DATA:-$ROOT/../shared/data/tinyshakespeare.txt}
BUILD=${BUILD:-$ROOT/build/bench}
PYTHON=${PYTHON:-/usr/bin/python3}
INIT=$BUILD/char_gpt_init.safetensors
TORCH_LOG=$BUILD/char_gpt_torch.out
QKV_LOG=$BUILD/char_gpt_qkv.out
WALL_LOG=$BUILD/char_gpt_wall.txt  # the start and end times of the two runs, for the report

if [[ "${CHAR_GPT_REPORT_ONLY:-0}" == 1 ]]; then
  read -r t0 t1 t2 < "$WALL_LOG"
else
if [[ "${CHAR_GPT_SKIP_BUILD:-0}" != 1 ]]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DQKV_CUDA=OFF -DQKV_TESTS=OFF > /dev/null
  cmake --build "$BUILD" --target qkv_char_gpt -j"$CHAR_GPT_THREADS" > /dev/null
fi
mkdir -p "$BUILD"

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "== steps $STEPS, threads $CHAR_GPT_THREADS, data $DATA"

echo "== PyTorch ($PYTHON bench/char_gpt_torch.py): writes the initial weights to $INIT"
t0=$(date +%s.%N)
"$PYTHON" bench/char_gpt_torch.py "$DATA" "$INIT" "$STEPS" > "$TORCH_LOG"
t1=$(date +%s.%N)
grep '^INFO' "$TORCH_LOG"

echo "== qkv ($BUILD/bench/qkv_char_gpt)"
"$BUILD/bench/qkv_char_gpt" "$DATA" "$INIT" "$STEPS" > "$QKV_LOG"
t2=$(date +%s.%N)
grep '^INFO' "$QKV_LOG"
echo "$t0 $t1 $t2" > "$WALL_LOG"
fi

"$PYTHON" - "$QKV_LOG" "$TORCH_LOG" "$t0" "$t1" "$t2" "$STEPS" <<'EOF'
import sys

def parse(path):
    val, train, time = {}, {}, None
    for line in open(path):
        f = line.split()
        if f and f[0] == "VAL": val[int(f[1])] = float(f[2])
        elif f and f[0] == "TRAIN": train[int(f[1])] = float(f[2])
        elif f and f[0] == "TIME": time = [float(v) for v in f[1:]]
    return val, train, time

(qv, qt, qtime), (tv, tt, ttime) = parse(sys.argv[1]), parse(sys.argv[2])
t0, t1, t2 = (float(v) for v in sys.argv[3:6])  # PyTorch ran from t0 to t1, then qkv to t2
t_wall, q_wall = t1 - t0, t2 - t1

print("\ntraining loss, first steps (identical init and batches):")
print(f"{'step':>6} {'qkv':>10} {'PyTorch':>10} {'difference':>11}")
for s in [1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 1500, 2000]:
    if s in qt and s in tt:
        print(f"{s:>6} {qt[s]:>10.6f} {tt[s]:>10.6f} {qt[s] - tt[s]:>+11.6f}")
common = sorted(set(qt) & set(tt))
for lo, hi in [(1, 1), (1, 10), (1, 100), (1, 500), (1, 2000)]:
    d = [abs(qt[s] - tt[s]) for s in common if lo <= s <= hi]
    if d and max(common) >= hi:
        print(f"  max |difference| of training loss, steps {lo}-{hi}: {max(d):.2e}")

print("\nvalidation loss (mean cross-entropy over the same 200 batches of 12x64):")
print(f"{'step':>6} {'qkv val loss':>13} {'PyTorch val loss':>17} {'difference':>11}")
for s in sorted(set(qv) & set(tv)):
    print(f"{s:>6} {qv[s]:>13.4f} {tv[s]:>17.4f} {qv[s] - tv[s]:>+11.6f}")

print(f"\n{'':10} {'wall s':>8} {'train s':>8} {'ms/step':>8} {'tokens/s':>9}")
for name, wall, t in [("qkv", q_wall, qtime), ("PyTorch", t_wall, ttime)]:
    print(f"{name:10} {wall:>8.1f} {t[0]:>8.1f} {t[1]:>8.2f} {t[2]:>9.0f}")
print("  (wall: the whole process, including data loading and the evaluations; train: training steps only)")

final = max(set(qv) & set(tv))
diff = qv[final] - tv[final]
ok_abs, ok_diff = qv[final] <= 1.88, abs(diff) <= 0.03
label = "" if final == 2000 else f"  [PARTIAL RUN: step {final}, not 2000; the targets are for step 2000]"
print(f"\nverdict at step {final}: qkv val loss {qv[final]:.4f} {'<=' if ok_abs else '>'} 1.88 "
      f"({'PASS' if ok_abs else 'FAIL'}); |qkv - PyTorch| = {abs(diff):.6f} {'<=' if ok_diff else '>'} 0.03 "
      f"({'PASS' if ok_diff else 'FAIL'}){label}")
EOF
