#!/usr/bin/env bash
# The accuracy of quantized weights against float32 (issue 36, "Accuracy, stated and tested"; bench/README.md
# "Accuracy of quantized weights"): two stages, each ending in a table with the stated bounds and PASS or FAIL.
#
#   1. lm: the `small` char LM (`qkv train --config small`: nanoGPT's CPU recipe) trained natively for 2000 steps on
#      tinyshakespeare, then `qkv quantize --weights int8|q4|f16|bf16` of its checkpoint, and each format against
#      float32 on the last 10% of the text, the split `qkv train` holds out (it trains on the first 90% only):
#      held-out perplexity (also by `qkv eval`), logits' max difference / max |logit|, KL, argmax agreement.
#   2. gpt2: GPT-2 124M's shape with bench/gpt2_export.py's random weights (`qkv import`ed), each format against
#      float32 on the benchmark's 32-token prompt and float32's own greedy continuation of 224 tokens: the
#      continuation's perplexity, the logits' error, KL, argmax agreement.
# Each stage then reads the quantized files' packed matrices back (bench/quant_weight_error.py, numpy) and gives
# their error against the float32 weights (the same for a trained and a random model), and compares each int8 and
# q4 model with a float32 model holding its dequantized weights: what qkv's quantized products add (<= 1e-5).
#
#   bench/quant_accuracy.sh                        # both stages: 8 minutes on the 2-core machine after the build
#   QUANT_ACC_SKIP_GPT2=1 bench/quant_accuracy.sh  # the lm stage only
#   QUANT_ACC_GPT2_REF=/path/imported.safetensors bench/quant_accuracy.sh   # an existing float32 GPT-2 checkpoint
#
# Env: BUILD_DIR (build/native), QUANT_ACC_DIR (build/quant_accuracy: checkpoints and logs; the GPT-2 files take
#      ~920 MB, 1 GB more during the products check), QUANT_ACC_DATA (../shared/data/tinyshakespeare.txt),
#      QUANT_ACC_STEPS (2000), QUANT_ACC_THREADS (2),
#      QUANT_ACC_FORMATS ("int8 q4 f16 bf16 q4-f32emb"; q4-f32emb: q4 with the token embedding, which is also the
#      tied head, left float32), QUANT_ACC_DEQUANT ("int8 q4": the formats of the products' check),
#      QUANT_ACC_GPT2_REF (build/gpt2/imported.safetensors, which bench/run_gpt2.sh makes;
#      made here from gpt2_export.py --hub-only + `qkv import` when missing),
#      QUANT_ACC_RETRAIN=1 (train again although $QUANT_ACC_DIR holds the checkpoint of that many steps),
#      QUANT_ACC_SKIP_LM=1, QUANT_ACC_SKIP_GPT2=1, QUANT_ACC_SKIP_BUILD=1,
#      PYTHON (/usr/bin/python3: numpy; torch for the export).
# Exit status: 0 when every bound holds, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-$ROOT/build/native}
DIR=${QUANT_ACC_DIR:-$ROOT/build/quant_accuracy}
DATA=${QUANT_ACC_DATA:-$ROOT/../shared/data/tinyshakespeare.txt}
STEPS=${QUANT_ACC_STEPS:-2000}
THREADS=${QUANT_ACC_THREADS:-2}
FORMATS=${QUANT_ACC_FORMATS:-int8 q4 f16 bf16 q4-f32emb}
DEQUANT=${QUANT_ACC_DEQUANT:-int8 q4}
GPT2_REF=${QUANT_ACC_GPT2_REF:-$ROOT/build/gpt2/imported.safetensors}
PYTHON=${PYTHON:-/usr/bin/python3}
QKV=$BUILD_DIR/cpp/tools/qkv
ACC=$BUILD_DIR/bench/qkv_quant_accuracy

if [[ "${QUANT_ACC_SKIP_BUILD:-0}" != 1 ]]; then
  cmake --preset native > /dev/null
  cmake --build "$BUILD_DIR" -j 2 --target qkv qkv_quant_accuracy > /dev/null
fi
mkdir -p "$DIR"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
  "qkv commit $(git rev-parse --short HEAD 2> /dev/null || echo '?'); threads $THREADS;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
seconds() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(seconds)" 'BEGIN { printf "%.1f", b - a }'; }

# Quantizes $1 into $2_<format>.safetensors for every format (again when the float32 file is newer). A format's
# "-f32emb" variant keeps the token embedding (the tied head) in float32: --embedding false.
quantize_all() {
  for f in $FORMATS; do
    local out="$2_$f.safetensors" embedding=true
    [[ $f == *-f32emb ]] && embedding=false
    if [[ ! -f $out || $1 -nt $out ]]; then
      "$QKV" quantize --weights "${f%%-*}" --embedding $embedding "$1" "$out" > /dev/null
    fi
  done
}
format_args() { for f in $FORMATS; do echo "$f=$1_$f.safetensors"; done; }

# The error qkv's quantized products add to the weights' own: for each format of $DEQUANT, a float32 checkpoint
# holding the dequantized weights (quant_weight_error.py --dequantized) as the reference, the quantized file as the
# format, logits within 1e-5 (quantize_test.cpp's tolerance). $1 stage, $2 float32 checkpoint, $3 prefix of the
# quantized files, then the stage's other arguments. The dequantized files (as big as float32's) are deleted after.
products_check() {
  local stage=$1 ref=$2 prefix=$3 out=$DIR/dequantized_$1 f
  shift 3
  mkdir -p "$out"
  # shellcheck disable=SC2046
  "$PYTHON" bench/quant_weight_error.py "$ref" $(for f in $DEQUANT; do echo "$f=${prefix}_$f.safetensors"; done) \
    --dequantized "$out" > /dev/null
  echo "the products' own error: each format against float32 holding its dequantized weights (bound 1e-5):"
  for f in $DEQUANT; do
    "$ACC" "$stage" "$out/${f}_dequantized.safetensors" "$@" "$f=${prefix}_$f.safetensors" --threads "$THREADS" \
      --logit-bound 1e-5 > "$DIR/${stage}_products_$f.log" || status=1
    grep -E "^\| $f " "$DIR/${stage}_products_$f.log"
  done
  rm -rf "$out"
}

if [[ "${QUANT_ACC_SKIP_LM:-0}" != 1 ]]; then
  echo
  echo "== stage lm: the small char LM, $STEPS steps on $DATA"
  CKPT=$DIR/small_${STEPS}.safetensors
  HELDOUT=$DIR/heldout.txt
  # The last 10% of the characters: `qkv train`'s held-out split (cpp/tools/task.cpp, LmTask::set_data), which no
  # training batch reads. A char tokenizer has one token per character, so characters, not bytes, are counted.
  "$PYTHON" -c '
import sys
t = open(sys.argv[1], encoding="utf-8").read()
open(sys.argv[2], "w", encoding="utf-8", newline="").write(t[len(t) - len(t) // 10:])' "$DATA" "$HELDOUT"
  if [[ ! -f $CKPT || "${QUANT_ACC_RETRAIN:-0}" == 1 ]]; then
    t0=$(seconds)
    "$QKV" train --data "$DATA" --config small --steps "$STEPS" --threads "$THREADS" --eval-every 500 \
      --out "$DIR/small_${STEPS}.partial.safetensors" > "$DIR/train.log" 2>&1
    mv "$DIR/small_${STEPS}.partial.safetensors" "$CKPT"
    echo "trained in $(elapsed "$t0") s (niceness $(nice)):"
    grep -E '^(eval|done)' "$DIR/train.log" || true
  else
    echo "reusing $CKPT (QUANT_ACC_RETRAIN=1 trains again); its training log:"
    grep -E '^(eval|done)' "$DIR/train.log" 2> /dev/null || true
  fi
  quantize_all "$CKPT" "$DIR/small_${STEPS}"
  echo "qkv eval --data $HELDOUT (the held-out 10%):"
  for f in f32 $FORMATS; do
    file=$CKPT
    [[ $f == f32 ]] || file=$DIR/small_${STEPS}_$f.safetensors
    printf '  %-5s %s\n' "$f" "$("$QKV" eval --ckpt "$file" --data "$HELDOUT" --threads "$THREADS")"
  done
  t0=$(seconds)
  # shellcheck disable=SC2046
  "$ACC" lm "$CKPT" "$HELDOUT" $(format_args "$DIR/small_${STEPS}") --threads "$THREADS" | tee "$DIR/lm.log" ||
    status=1
  echo "stage lm: compared in $(elapsed "$t0") s"
  echo "the weights' own error (bench/quant_weight_error.py):"
  # shellcheck disable=SC2046
  "$PYTHON" bench/quant_weight_error.py "$CKPT" $(format_args "$DIR/small_${STEPS}") | tee "$DIR/lm_weights.log"
  products_check lm "$CKPT" "$DIR/small_${STEPS}" "$HELDOUT"
fi

if [[ "${QUANT_ACC_SKIP_GPT2:-0}" != 1 ]]; then
  echo
  if [[ ! -f $GPT2_REF ]]; then
    echo "(no $GPT2_REF: using $DIR/gpt2/imported.safetensors)"
    GPT2_REF=$DIR/gpt2/imported.safetensors
    if [[ ! -f $GPT2_REF ]]; then
      echo "(none there either: bench/gpt2_export.py --hub-only $DIR/gpt2, then qkv import)"
      "$PYTHON" bench/gpt2_export.py "$DIR/gpt2" --hub-only
      "$QKV" import "$DIR/gpt2/hub" "$GPT2_REF" > /dev/null
    fi
  fi
  echo "== stage gpt2: GPT-2 124M's shape, random weights ($GPT2_REF)"
  t0=$(seconds)
  quantize_all "$GPT2_REF" "$DIR/gpt2"
  echo "quantized in $(elapsed "$t0") s"
  t0=$(seconds)
  # shellcheck disable=SC2046
  "$ACC" gpt2 "$GPT2_REF" $(format_args "$DIR/gpt2") --threads "$THREADS" --prompt 32 --new 224 |
    tee "$DIR/gpt2.log" || status=1
  echo "stage gpt2: compared in $(elapsed "$t0") s"
  echo "the weights' own error (bench/quant_weight_error.py):"
  # shellcheck disable=SC2046
  "$PYTHON" bench/quant_weight_error.py "$GPT2_REF" $(format_args "$DIR/gpt2") | tee "$DIR/gpt2_weights.log"
  products_check gpt2 "$GPT2_REF" "$DIR/gpt2" --prompt 32 --new 224
fi
exit $status
