# qkv import: the fixtures' PyTorch state dicts (tests/fixtures/import) become qkv checkpoints that the
# other commands read; info takes its file positionally; a pickle and a file that does not fit are refused.
FIX=$(realpath "$(dirname "$0")/../fixtures/import")
source "$(dirname "$0")/lib.sh"

expect 0 "format +nanogpt" -- import "$FIX/nanogpt_bias.safetensors" gpt.safetensors --heads 4
grep -Eq '^model +language_model$' "$OUT" || fail "import does not say the model kind"
expect 0 '"tie_head":true' -- info gpt.safetensors          # positional
expect 0 "^model +language_model" -- info --ckpt gpt.safetensors
expect 0 "format +seed004" -- import "$FIX/seed004_transformer.safetensors" s4.safetensors
grep -q "sqrt(head_dim / embed_size)" "$OUT" || fail "import seed004 does not state the scale it folds into W_q"
expect 0 "^model +seq2seq" -- info s4.safetensors
expect 0 "format +torch" -- import --from torch "$FIX/torch_seq2seq_tutorial.safetensors" t.safetensors --heads 4
grep -q "pos_embedding.*matches qkv's sinusoidal position table" "$OUT" || fail "the tutorial's table is not reported"
for c in seed000_encoder:2 seed002_transformer:4 seed003_classifier:4 nanogpt_nobias:4; do
  expect 0 "wrote" -- import "$FIX/${c%%:*}.safetensors" "${c%%:*}.safetensors" --heads "${c##*:}"
done
expect 0 "seed004 names \(qkv import --from seed004" -- info "$FIX/seed004_transformer.safetensors"

# With a tokenizer (13 tokens: the 4 specials and 9 characters), qkv generate runs the imported GPT.
echo '{"version":1,"kind":"char","special":{"pad":true,"bos":true,"eos":true,"unk":true},"vocab":[" ","a","b","c","d","e","f","g","h"]}' >tok.json
expect 0 "wrote" -- import "$FIX/nanogpt_bias.safetensors" gen.safetensors --heads 4 --tokenizer tok.json
expect 0 "^abc" -- generate --ckpt gen.safetensors --prompt abc --max-tokens 5 --temperature 0
echo '{"version":1,"kind":"char","special":{"pad":true,"bos":true,"eos":true,"unk":true},"vocab":["a"]}' >small.json
expect 1 "small.json: the tokenizer has 5 tokens, the model's vocabulary 13" -- \
  import "$FIX/nanogpt_bias.safetensors" x.safetensors --heads 4 --tokenizer small.json

# Refusals: heads missing, the wrong format, a pickle, a usage mistake.
expect 1 "give it \(qkv import --heads N" -- import "$FIX/nanogpt_bias.safetensors" x.safetensors
expect 1 "tensor \"encoder.embedding.weight\" is missing" -- \
  import --from seed000 "$FIX/seed003_classifier.safetensors" x.safetensors --heads 4
printf 'PK\003\004\024\000\000\000\000\000' >model.pt
expect 1 'safetensors.torch.save_file\(model.state_dict\(\), "model.safetensors"\)' -- import model.pt x.safetensors
expect 1 'safetensors.torch.save_file' -- info model.pt
expect 2 "--from" -- import --from keras "$FIX/nanogpt_bias.safetensors" x.safetensors
expect 2 "OUT" -- import "$FIX/nanogpt_bias.safetensors"
expect 2 "give the file" -- info
[ ! -e x.safetensors ] || fail "a refused import wrote its output"
echo "ok"
