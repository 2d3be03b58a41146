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
expect 2 "--temperature.*temperature = -1" -- generate --ckpt x --prompt a --temperature -1
expect 2 "--beam: Value 0 not in range" -- generate --ckpt x --prompt a --beam 0
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
