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
expect 0 "nanogpt names \(qkv import --from nanogpt --heads N converts it: its shapes cannot tell the heads\)" -- \
  info "$FIX/nanogpt_bias.safetensors"
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

# Hugging Face GPT-2 folders (tests/fixtures/import/gpt2_*: config.json + model.safetensors): info and import
# take the folder, generate runs straight from it on token ids and gives PyTorch's greedy tokens
# (gpt2_<case>.greedy.txt: the prompt, then the ids), as does the imported checkpoint.
expect 0 "^model +a GPT-2 \(Hugging Face\) checkpoint: 2 layers, 2 heads, n_embd 16, vocabulary 61" -- \
  info "$FIX/gpt2_gelu"
expect 0 "a GPT-2 \(Hugging Face\) state dict" -- info "$FIX/gpt2_gelu/model.safetensors"
expect 0 "format +gpt2" -- import "$FIX/gpt2_gelu" g2.safetensors
grep -q '"attn.bias" buffers are GPT-2.s causal mask' "$OUT" || fail "import does not report the buffers it ignored"
expect 0 '"d_ff":24' -- info g2.safetensors
for c in gelu hub lmhead f16 bf16; do
  { read -r prompt; read -r greedy; } <"$FIX/gpt2_$c.greedy.txt"
  expect 0 "^$greedy\$" -- generate --model "$FIX/gpt2_$c" --prompt-ids "$prompt" --max-tokens 8 --temperature 0 --seed 1
done
{ read -r prompt; read -r greedy; } <"$FIX/gpt2_gelu.greedy.txt"
expect 0 "^$greedy\$" -- generate --ckpt g2.safetensors --prompt-ids "${prompt// /,}" --max-tokens 8 --temperature 0 \
  --seed 1

# A folder with its BPE tokenizer (gpt2_tok: the BPE fixture's tokenizer.json, vocabulary 657). generate --prompt
# TEXT encodes the text, continues it greedily and prints exactly gpt2_tok.generate.txt: the prompt, then PyTorch's
# greedy ids decoded by the fixture script's GPT-2 byte decoder (they include partial UTF-8 and a control byte),
# then a newline. The same through the vocab.json + merges.txt files, and through an imported checkpoint.
prompt_text=$(cat "$FIX/gpt2_tok.prompt.txt")
{ read -r prompt; read -r greedy; } <"$FIX/gpt2_tok.greedy.txt"
expect 0 "^tokenizer +byte-level BPE, 657 tokens, from tokenizer.json$" -- info "$FIX/gpt2_tok"
expect 0 "^tokenizer +none found \(qkv generate then takes --prompt-ids\)$" -- info "$FIX/gpt2_gelu"
expect 0 "^$greedy\$" -- generate --model "$FIX/gpt2_tok" --prompt-ids "$prompt" --max-tokens 8 --temperature 0 --seed 1
# generate_text DIR|FILE FLAG: stdout alone (no seed line: --seed is given) must be gpt2_tok.generate.txt, byte for byte.
generate_text() {
  "$QKV" generate "$1" "$2" --prompt "$prompt_text" --max-tokens 8 --temperature 0 --seed 1 >got.txt 2>"$OUT" ||
    fail "qkv generate $1 $2 --prompt ... failed"
  cmp got.txt "$FIX/gpt2_tok.generate.txt" >/dev/null ||
    fail "qkv generate $1 $2 --prompt printed $(od -c got.txt | head -8), expected $(od -c "$FIX/gpt2_tok.generate.txt" | head -8)"
}
generate_text --model "$FIX/gpt2_tok"
mkdir vm && cp "$FIX/gpt2_tok/config.json" "$FIX/gpt2_tok/model.safetensors" vm/
cp "$FIX/../bpe/vocab.json" "$FIX/../bpe/merges.txt" vm/
expect 0 "^tokenizer +byte-level BPE, 657 tokens, from vocab.json \+ merges.txt$" -- info vm
generate_text --model vm
expect 0 "wrote +tok.safetensors" -- import "$FIX/gpt2_tok" tok.safetensors
generate_text --ckpt tok.safetensors
expect 0 "wrote +vm.safetensors" -- import vm vm.safetensors
generate_text --ckpt vm.safetensors
# The end of the text: config.json's eos_token_id ends generation unprinted, as transformers' generate stops there;
# --ignore-eos goes on. gpt2_tok's greedy ids are 213 543 447 ... (0x19, " which", ...): with eos_token_id 447 the
# model stops after two tokens, with a list [999, 543] after one.
mkdir eos && cp "$FIX/gpt2_tok/model.safetensors" "$FIX/gpt2_tok/tokenizer.json" eos/
sed 's/"eos_token_id": 50256/"eos_token_id": 447/' "$FIX/gpt2_tok/config.json" >eos/config.json
grep -q '"eos_token_id": 447' eos/config.json || fail "the eos fixture's config.json was not edited"
expect 0 "^213 543\$" -- generate --model eos --prompt-ids "$prompt" --max-tokens 8 --temperature 0 --seed 1
expect 0 "^$greedy\$" -- generate --model eos --prompt-ids "$prompt" --max-tokens 8 --temperature 0 --seed 1 --ignore-eos
"$QKV" generate --model eos --prompt "$prompt_text" --max-tokens 8 --temperature 0 --seed 1 >got.txt 2>"$OUT" ||
  fail "qkv generate --model eos --prompt ... failed"
printf '%s\031 which\n' "$prompt_text" >want.txt
cmp got.txt want.txt >/dev/null || fail "generate stopped at eos printed $(od -c got.txt | tail -4), expected $(od -c want.txt | tail -4)"
"$QKV" generate --model eos --prompt "$prompt_text" --max-tokens 8 --temperature 0 --seed 1 --ignore-eos >got.txt \
  2>"$OUT" || fail "qkv generate --model eos --ignore-eos failed"
cmp got.txt "$FIX/gpt2_tok.generate.txt" >/dev/null || fail "--ignore-eos did not print the whole greedy text"
sed 's/"eos_token_id": 50256/"eos_token_id": [999, 543]/' "$FIX/gpt2_tok/config.json" >eos/config.json
expect 0 "^213\$" -- generate --model eos --prompt-ids "$prompt" --max-tokens 8 --temperature 0 --seed 1
# Without eos_token_id in config.json, the tokenizer's <|endoftext|>: here given id 447 (swapped with "âĢ"'s).
grep -v '"eos_token_id"' "$FIX/gpt2_tok/config.json" >eos/config.json
sed -e 's/"âĢ": *447/"âĢ": 656/' -e 's/"<|endoftext|>": *656/"<|endoftext|>": 447/' -e 's/"id": *656/"id": 447/' \
  "$FIX/gpt2_tok/tokenizer.json" >eos/tokenizer.json
grep -q '"<|endoftext|>": *447' eos/tokenizer.json || fail "the eos fixture's tokenizer.json was not edited"
expect 0 "^213 543\$" -- generate --model eos --prompt-ids "$prompt" --max-tokens 8 --temperature 0 --seed 1
cp "$FIX/gpt2_tok/tokenizer.json" eos/tokenizer.json
sed 's/"eos_token_id": 50256/"eos_token_id": "x"/' "$FIX/gpt2_tok/config.json" >eos/config.json
expect 1 "eos_token_id is \"x\": expected a token id or a list of them" -- \
  generate --model eos --prompt-ids "$prompt" --max-tokens 8 --temperature 0 --seed 1
expect 2 "--ignore-eos: a checkpoint has no end-of-text token" -- \
  generate --ckpt vm.safetensors --prompt-ids 1 --ignore-eos --seed 1
# A tokenizer larger than the model's vocabulary (gpt2_gelu's 61) is refused by generate and import, naming both.
mkdir big && cp "$FIX/gpt2_gelu/config.json" "$FIX/gpt2_gelu/model.safetensors" "$FIX/gpt2_tok/tokenizer.json" big/
expect 1 "big: the tokenizer has 657 tokens, more than the model's vocabulary of 61" -- \
  generate --model big --prompt "hi" --seed 1
expect 1 "big: the tokenizer has 657 tokens, more than the model's vocabulary of 61" -- import big x.safetensors
# Half of the older files, or a malformed tokenizer.json, is refused naming the files and the folder.
mkdir half && cp vm/config.json vm/model.safetensors vm/vocab.json half/
expect 1 "half: the folder has vocab.json but not merges.txt" -- generate --model half --prompt "hi" --seed 1
expect 1 "half: the folder has vocab.json but not merges.txt" -- import half x.safetensors
expect 1 "half: the folder has vocab.json but not merges.txt" -- info half
! grep -q "^folder" "$OUT" || fail "info half printed the folder's rows before refusing its tokenizer"
mkdir badjson && cp vm/config.json vm/model.safetensors badjson/ && echo '{"model": ' >badjson/tokenizer.json
expect 1 "badjson: tokenizer.json: " -- generate --model badjson --prompt "hi" --seed 1
expect 1 "badjson: tokenizer.json: " -- import badjson x.safetensors
expect 1 "badjson: tokenizer.json: " -- info badjson

# Refusals: a text prompt to a folder without a tokenizer, ids out of range, an architecture qkv does not run, a
# pickle alone.
expect 2 "--model gpt.safetensors is a file: --model takes a Hugging Face model folder .*; a qkv checkpoint is --ckpt FILE" -- \
  generate --model gpt.safetensors --prompt abc
expect 2 "gpt2_gelu has no tokenizer \(tokenizer.json, or vocab.json \+ merges.txt\): give the prompt as token ids \(--prompt-ids\)" -- \
  generate --model "$FIX/gpt2_gelu" --prompt "hi" --seed 1
expect 2 "token id 61 is out of range" -- generate --model "$FIX/gpt2_gelu" --prompt-ids "1,61" --seed 1
expect 2 "--prompt-ids \"1,x\": expected token ids" -- generate --model "$FIX/gpt2_gelu" --prompt-ids "1,x" --seed 1
expect 2 "give the model" -- generate --prompt-ids 1 --seed 1
expect 2 "config.json gives the architecture" -- import "$FIX/gpt2_gelu" x.safetensors --heads 2
mkdir llama && sed 's/"model_type": "gpt2"/"model_type": "llama"/' "$FIX/gpt2_gelu/config.json" >llama/config.json
expect 1 'model_type "llama" is an architecture qkv does not run' -- import llama x.safetensors
expect 1 'model_type "llama"' -- info llama
mkdir bin && cp "$FIX/gpt2_gelu/config.json" bin/ && cp model.pt bin/pytorch_model.bin
expect 1 'pytorch_model.bin \(there is no model.safetensors\): the file is a PyTorch pickle.*save_file' -- \
  import bin x.safetensors
[ ! -e x.safetensors ] || fail "a refused import wrote its output"

# An output that would replace an input is refused before any work; a qkv checkpoint imported again keeps its
# tokenizer (qkv generate still reads text from it).
cp -r "$FIX/gpt2_tok" folder
expect 2 "OUT folder/model.safetensors would replace the folder folder's own model.safetensors" -- \
  import folder folder/model.safetensors
cmp folder/model.safetensors "$FIX/gpt2_tok/model.safetensors" || fail "the refused import touched the folder"
expect 2 "OUT gen.safetensors is the input gen.safetensors itself" -- import gen.safetensors gen.safetensors
expect 2 "OUT missing/x.safetensors: the folder missing does not exist" -- import folder missing/x.safetensors
expect 0 "format +qkv" -- import gen.safetensors again.safetensors
expect 0 "^abc" -- generate --ckpt again.safetensors --prompt abc --max-tokens 5 --temperature 0
echo "ok"
