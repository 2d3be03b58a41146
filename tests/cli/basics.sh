# The qkv tool: help, usage errors (exit 2) and the CUDA refusal (exit 1).
source "$(dirname "$0")/lib.sh"
make_text text.txt

expect 0 "Subcommands" -- --help
for command in train generate eval info import quantize bench; do
  grep -Eq "^  $command " "$OUT" || fail "qkv --help does not list $command"
done
for command in train generate eval info import quantize bench; do
  expect 0 "Usage|usage|Options|OPTIONS" -- "$command" --help
done
expect 0 "lm tiny.*batch" -- train --help        # the presets are listed
expect 0 "Exit status" -- train --help
expect 0 "^qkv [0-9]+\.[0-9]+\.[0-9]+" -- --version

"$QKV" >"$OUT" 2>&1 && fail "qkv with no command should fail" || [ $? -eq 2 ] || fail "qkv with no command: expected 2"
expect 2 "frobnicate" -- frobnicate
expect 2 "--bogus" -- train --data text.txt --bogus
expect 2 "--data" -- train
expect 2 "--steps" -- train --data text.txt --steps 0
expect 2 "--steps" -- train --data text.txt --steps many
expect 2 "--model" -- train --data text.txt --model rnn
expect 2 "--device" -- train --data text.txt --device tpu
expect 2 "--precision: fp16 not in" -- train --data text.txt --precision fp16
# --precision other than fp32 is a CUDA setting: on the CPU it is refused, naming the fix.
expect 2 "--precision bf16 is a CUDA setting \(the CPU computes in fp32\): add --device cuda" -- train --data text.txt --precision bf16
expect 2 "--precision tf32 is a CUDA setting" -- generate --ckpt x --prompt a --precision tf32
expect 2 "--precision bf16 is a CUDA setting" -- eval --ckpt x --data text.txt --precision bf16
expect 2 "preset \(tiny, small\)" -- train --data text.txt --config huge
expect 2 "--top-p.*top_p = 1.5" -- generate --ckpt x --prompt a --top-p 1.5
expect 2 "--temperature: expected a number >= 0, got \"-1\"" -- generate --ckpt x --prompt a --temperature -1
expect 2 "--temperature: expected a number >= 0, got \"nan\"" -- generate --ckpt x --prompt a --temperature nan
expect 2 "--beam: expected a whole number from 1 to 64, got \"0\"" -- generate --ckpt x --prompt a --beam 0
# Numbers and booleans say what they expect, whatever the text (CLI11's own checks printed a 300-digit range).
expect 2 "--threads: expected a whole number >= 1, got \"0\"" -- generate --ckpt x --prompt a --threads 0
expect 2 "--max-tokens: expected a whole number >= 0, got \"abc\"" -- generate --ckpt x --prompt a --max-tokens abc
expect 2 "--max-tokens: expected a whole number from 0 to 2147483647, got \"99999999999\"" -- \
  generate --ckpt x --prompt a --max-tokens 99999999999
expect 2 "--seed: expected a whole number >= 0, got \"-1\"" -- generate --ckpt x --prompt a --seed -1
expect 2 "--steps: expected a whole number >= 1, got \"1.5\"" -- train --data text.txt --steps 1.5
expect 2 "--seed: expected a whole number >= 0, got \"-5\"" -- train --data text.txt --seed -5
expect 2 "--lr: expected a number > 0, got \"0\"" -- train --data text.txt --lr 0
expect 2 "--bucket-mb: expected a number > 0 and <= 4096, got \"-1\"" -- train --data text.txt --bucket-mb -1
expect 2 "--embedding: expected true or false, got \"maybe\"" -- quantize x y --weights q4 --embedding maybe
expect 2 "--scale-embedding: expected true or false, got \"2\"" -- import x y --scale-embedding 2
expect 2 "--resume" -- train --data text.txt --resume x --batch 3
expect 2 "--threads" -- train --data text.txt --threads 100000
# No GPU on the test machines: --device cuda and a config's "device": "cuda" are refused up front with the
# reason (this build has no CUDA, or cudaGetDeviceCount finds no device), before any file is read.
expect 1 "--device cuda: CUDA cannot be used here: .*(CUDA was not built|no CUDA device)" -- train --data text.txt --device cuda
expect 1 "--device cuda: CUDA cannot be used here" -- generate --ckpt x --prompt a --device cuda
expect 1 "--device cuda: CUDA cannot be used here" -- eval --ckpt x --data text.txt --device cuda
echo '{"device": "cuda"}' >cuda.json
expect 1 "cuda.json: \"device\": \"cuda\": CUDA cannot be used here" -- train --data text.txt --config cuda.json
echo '{"device": "tpu"}' >tpu.json
expect 1 "tpu.json: \"device\" = \"tpu\" is invalid: expected \"cpu\" or \"cuda\"" -- train --data text.txt --config tpu.json
echo "ok"
