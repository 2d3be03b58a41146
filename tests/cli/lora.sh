# LoRA from the command line: qkv train --lora --init on a Hugging Face GPT-2 folder (tests/fixtures/import/gpt2_tok,
# with its BPE tokenizer) and on a checkpoint of qkv's own, the adapter written as PEFT saves it (GPT-2's module names
# for the GPT-2 model, qkv's otherwise), a resumed run that continues exactly, info on both files, generate --adapter
# against the checkpoint with adapters and the merged model, and the refusals.
FIX=$(realpath "$(dirname "$0")/../fixtures/import")
source "$(dirname "$0")/lib.sh"
make_text text.txt
G="$FIX/gpt2_tok"
SPEC=rank=2,alpha=4,targets=qkv+out+up+down

# A GPT-2 folder: 6 steps of LoRA; the checkpoint holds base + adapters, the adapter folder GPT-2's names.
expect 0 "done step 6/6" -- train --threads 1 --data text.txt --init "$G" --lora "$SPEC" --steps 6 --batch 2 \
  --eval-every 3 --lr 0.01 --out ft.safetensors --adapter-out ad
[ -f ad/adapter_config.json ] && [ -f ad/adapter_model.safetensors ] || fail "train --adapter-out wrote no adapter files"
grep -q '"fan_in_fan_out": true' ad/adapter_config.json || fail "the GPT-2 adapter's config has no fan_in_fan_out: true"
grep -q '"peft_type": "LORA"' ad/adapter_config.json || fail "the adapter's config has no peft_type LORA"
grep -q "\"base_model_name_or_path\": \"$G\"" ad/adapter_config.json || fail "base_model_name_or_path is not the folder"
expect 0 "base_model.model.transformer.h.1.mlp.c_proj.lora_B.weight +F32 +\[16, 2\]" -- info ad/adapter_model.safetensors
expect 0 "^lora +rank=2,alpha=4,dropout=0,targets=qkv\+out\+up\+down,seed=0: 16 tensors, 1024 parameters" -- \
  info ft.safetensors
grep -Eq "^step +6 \(with optimizer state\)" "$OUT" || fail "info: the adapters' steps are not the checkpoint's"

# Resumed after 6 steps, the run ends where 8 uninterrupted steps end (the same last loss, the same adapter bytes).
expect 0 "done step 8/8" -- train --threads 1 --data text.txt --init "$G" --lora "$SPEC" --steps 8 --batch 2 \
  --eval-every 3 --lr 0.01 --out straight.safetensors --adapter-out straight
straight=$(grep -o "done step 8/8: loss [0-9.]*" "$OUT")
cp ft.safetensors resumed.safetensors
expect 0 "done step 8/8" -- train --threads 1 --data text.txt --resume resumed.safetensors --steps 8 \
  --adapter-out resumed
[ "$(grep -o "done step 8/8: loss [0-9.]*" "$OUT")" = "$straight" ] || fail "the resumed run's loss is not $straight"
cmp straight/adapter_model.safetensors resumed/adapter_model.safetensors || fail "the resumed adapter differs"

# Without activation recomputation (--recompute off; LoRA's default recomputes) the same 8 steps give the same loss and
# the same adapter bytes: recomputing runs the same ops in the same order.
expect 0 "done step 8/8" -- train --threads 1 --data text.txt --init "$G" --lora "$SPEC" --steps 8 --batch 2 \
  --eval-every 3 --lr 0.01 --out kept.safetensors --adapter-out kept --recompute off
[ "$(grep -o "done step 8/8: loss [0-9.]*" "$OUT")" = "$straight" ] || fail "--recompute off's loss is not $straight"
cmp straight/adapter_model.safetensors kept/adapter_model.safetensors || fail "--recompute off's adapter differs"
expect 2 "--recompute: sometimes not in \{auto,on,off\}" -- train --threads 1 --data text.txt --init "$G" \
  --lora "$SPEC" --recompute sometimes

# generate: the checkpoint with adapters, the folder with --adapter, and the merged model give the same greedy ids.
ids() {
  expect 0 "^[0-9 ]+$" -- generate --threads 1 "$@" --prompt-ids 5,6,7 --max-tokens 8 --temperature 0 --seed 1
  tail -n 1 "$OUT"
}
with_ckpt=$(ids --ckpt ft.safetensors)
[ "$(ids --model "$G" --adapter ad)" = "$with_ckpt" ] || fail "--model --adapter differs from the checkpoint"
expect 0 "^merged +into" -- merge "$G" ad merged.safetensors
[ "$(ids --ckpt merged.safetensors)" = "$with_ckpt" ] || fail "the merged model differs from the adapted one"
expect 0 "^tokenizer +bpe" -- info merged.safetensors
expect 0 "^the" -- generate --threads 1 --ckpt ft.safetensors --prompt "the" --max-tokens 4 --seed 1

# A checkpoint of qkv's own: the adapter in qkv's names; --adapter-names gpt2 where GPT-2 has no module is refused.
"$QKV" train --threads 1 --data text.txt --config tiny.json --steps 10 --out lm.safetensors >"$OUT" 2>&1 || fail "train"
expect 0 "done step 4/4" -- train --threads 1 --data text.txt --init lm.safetensors --lora rank=3,targets=q+v+head \
  --steps 4 --out lm_ft.safetensors --adapter-out qa
expect 0 "base_model.model.layers.0.self_attn.in_proj_q.lora_A.weight +F32 +\[3, 32\]" -- info qa/adapter_model.safetensors
grep -q '"fan_in_fan_out": false' qa/adapter_config.json || fail "a qkv-named adapter has fan_in_fan_out true"
expect 0 "^the" -- generate --threads 1 --ckpt lm.safetensors --adapter qa --prompt "the" --max-tokens 4 --seed 1
expect 2 "--adapter-names gpt2: GPT-2 has no separate q module" -- train --threads 1 --data text.txt \
  --init lm.safetensors --lora targets=q+v --adapter-names gpt2 --steps 2 --adapter-out x

# Refusals: flags that do not combine, a bad spec, adapters twice, a quantized base to merge, a missing adapter.
expect 2 "--lora needs --init MODEL" -- train --threads 1 --data text.txt --lora "$SPEC"
expect 2 "--init MODEL starts LoRA fine-tuning: give --lora" -- train --threads 1 --data text.txt --init "$G"
expect 2 "--resume cannot be combined with --init" -- train --threads 1 --data text.txt --init "$G" --lora "$SPEC" \
  --resume ft.safetensors
expect 2 "--lora rank=0: lora rank = 0 is invalid" -- train --threads 1 --data text.txt --init "$G" --lora rank=0
expect 2 "lora rank = 99999999999 is invalid: expected an integer from 1 to 1048576" -- \
  train --threads 1 --data text.txt --init "$G" --lora rank=99999999999
expect 1 "already has LoRA adapters .*--resume" -- train --threads 1 --data text.txt --init ft.safetensors --lora "$SPEC"
expect 0 "wrote" -- quantize --weights int8 "$G" q8.safetensors
expect 1 "q8.safetensors: its weights are quantized \(int8\).*merge into the float32 model, then qkv quantize" -- \
  merge q8.safetensors ad x.safetensors
expect 1 "nope: not a folder" -- merge "$G" nope x.safetensors
expect 1 "adapter_model.safetensors: tensor \"base_model.model.layers.0.self_attn.in_proj_q.lora_A.weight\" has shape" -- \
  generate --threads 1 --model "$G" --adapter qa --prompt-ids 1 --max-tokens 1 --seed 1
[ ! -e x.safetensors ] || fail "a refused merge wrote its output"
echo "ok"
