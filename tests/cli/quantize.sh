# qkv quantize: a trained checkpoint and a Hugging Face folder become quantized checkpoints that info describes,
# generate and eval run, and train refuses; half-precision storage of an F16 / BF16 folder keeps its values, so
# generate gives PyTorch's greedy tokens exactly; bad formats and inputs are refused.
FIX=$(realpath "$(dirname "$0")/../fixtures/import")
source "$(dirname "$0")/lib.sh"
make_text text.txt

"$QKV" train --data text.txt --config tiny.json --steps 20 --eval-every 20 --out lm.safetensors --threads 1 \
  >"$OUT" 2>&1 || fail "train"
for w in int8 q4 f16 bf16; do
  expect 0 "^weights +$w: 5 tensors packed" -- quantize --weights "$w" lm.safetensors "lm_$w.safetensors"
  grep -Eq '^bytes +[0-9]+ -> [0-9]+ \([0-9.]+x smaller\)' "$OUT" || fail "quantize does not report the bytes"
  expect 0 "^weights +[0-9]+ bytes \(.*$w: 5 tensors" -- info "lm_$w.safetensors"
  expect 0 "^the" -- generate --ckpt "lm_$w.safetensors" --prompt "the" --max-tokens 5 --temperature 0
  expect 0 "perplexity" -- eval --ckpt "lm_$w.safetensors" --data text.txt --threads 1
done
expect 0 "layers.0.self_attn.in_proj_weight +I8 .* int8 \(" -- info lm_int8.safetensors
grep -Eq "layers.0.self_attn.in_proj_weight.scales +F32 +\[96, 1\] .* scales" "$OUT" || fail "info lists no scales"
# The tied embedding is packed by default; --embedding false keeps it float32.
expect 0 "tok_emb.weight +U8 .* q4" -- info lm_q4.safetensors
expect 0 "^weights +q4: 4 tensors packed" -- quantize --weights q4 --embedding false lm.safetensors nq.safetensors
expect 0 "tok_emb.weight +F32" -- info nq.safetensors
# Int8 activations (integer dot products while decoding): saved in the checkpoint, shown by info, generating.
for w in int8 q4; do
  expect 0 "^activations int8" -- quantize --weights "$w" --activations int8 lm.safetensors "lm_${w}_a8.safetensors"
  expect 0 "^activations +int8 \(decoding" -- info "lm_${w}_a8.safetensors"
  expect 0 "^the" -- generate --ckpt "lm_${w}_a8.safetensors" --prompt "the" --max-tokens 5 --temperature 0
done
expect 2 "--activations: int4 not in" -- quantize --weights q4 --activations int4 lm.safetensors x.safetensors
expect 2 "--activations int8 needs --weights int8 or q4" -- quantize --weights f16 --activations int8 lm.safetensors \
  x.safetensors

# A Hugging Face folder in half precision, stored as such: PyTorch's greedy tokens, bit-exact weights.
for c in f16 bf16; do
  { read -r prompt; read -r greedy; } <"$FIX/gpt2_$c.greedy.txt"
  expect 0 "wrote" -- quantize --weights "$c" "$FIX/gpt2_$c" "g_$c.safetensors"
  grep -Eq "^weights +$c: 9 tensors packed \(kept as the folder stores them" "$OUT" ||
    fail "quantize --weights $c of a $c folder went through float32"
  expect 0 "^$greedy\$" -- generate --ckpt "g_$c.safetensors" --prompt-ids "${prompt// /,}" --max-tokens 8 \
    --temperature 0 --seed 1
  # Kept in half precision at import (no float32 copy): the same checkpoint, byte for byte.
  expect 0 "^weights +9 matrices kept in $c" -- import --weights keep "$FIX/gpt2_$c" "k_$c.safetensors"
  cmp -s "g_$c.safetensors" "k_$c.safetensors" || fail "import --weights keep differs from quantize --weights $c"
done
# Another half format than the file's: the float32 load, quantized (the same checkpoint as from float32 values).
expect 0 "^weights +bf16: 9 tensors packed$" -- quantize --weights bf16 "$FIX/gpt2_f16" f16_as_bf16.safetensors
expect 2 "--weights: fp16 not in" -- import --weights fp16 "$FIX/gpt2_f16" x.safetensors
expect 2 "--weights applies to a model folder" -- import --weights keep "$FIX/nanogpt_bias.safetensors" x.safetensors \
  --heads 4

# Refusals: an unknown format, a checkpoint already quantized, training a quantized model, not a checkpoint.
expect 2 "--weights: int3 not in" -- quantize --weights int3 lm.safetensors x.safetensors
expect 2 "--weights" -- quantize lm.safetensors x.safetensors
expect 1 "already quantized \(int8\)" -- quantize --weights q4 lm_int8.safetensors x.safetensors
expect 1 "quantized \(int8.*LoRA" -- train --data text.txt --resume lm_int8.safetensors --steps 30 --threads 1
expect 1 "not a qkv checkpoint" -- quantize --weights int8 "$FIX/nanogpt_bias.safetensors" x.safetensors
[ ! -e x.safetensors ] || fail "a refused quantize wrote its output"
cp lm.safetensors keep.safetensors
expect 2 "OUT keep.safetensors is the input keep.safetensors itself: writing it would replace what is being read" -- \
  quantize --weights int8 keep.safetensors keep.safetensors
cmp keep.safetensors lm.safetensors || fail "the refused quantize replaced its input"
echo "ok"
