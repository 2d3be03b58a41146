# The qkv tool end to end: train each model kind for a few steps, then info, generate and eval on the
# checkpoints it wrote.
source "$(dirname "$0")/lib.sh"
make_text text.txt

# lm: progress lines on stderr (not a terminal: plain lines), evaluation lines and the final line on stdout.
expect 0 "done step 30/30: loss [0-9.]+, checkpoint saved to lm.safetensors" -- \
  train --data text.txt --config tiny.json --steps 30 --eval-every 10 --log-every 10 --out lm.safetensors --threads 1
grep -Eq "^step 10/30  loss [0-9.]+  [0-9]+ tok/s  ETA [0-9]+:[0-9]{2}$" "$OUT" || fail "no progress line"
[ "$(grep -Ec '^eval step (10|20|30): loss [0-9.]+  perplexity [0-9.]+  accuracy [0-9.]+$' "$OUT")" -eq 3 ] ||
  fail "expected evaluation lines at steps 10, 20, 30"
[ -s lm.safetensors ] || fail "no checkpoint"
ls | grep -q "\.tmp" && fail "a temporary file was left behind"

expect 0 "model +language_model" -- info --ckpt lm.safetensors
for pattern in "step +30 \(with optimizer state\)" "tokenizer +char, [0-9]+ tokens" "parameters +[0-9]+" \
  "config +\{.*\"d_model\":32" "tok_emb.weight +F32 +\[[0-9]+, 32\]" "train +\{.*\"batch\":4"; do
  grep -Eq "$pattern" "$OUT" || fail "info: nothing matches /$pattern/"
done
grep -qF "optimizer.m." "$OUT" && fail "info lists the moments without --all"
expect 0 "optimizer.m.tok_emb.weight" -- info --ckpt lm.safetensors --all

# generate: the prompt, then the new text; the same seed gives the same text.
expect 0 "^ROMEO:" -- generate --threads 1 --ckpt lm.safetensors --prompt "ROMEO:" --max-tokens 40 --seed 5 --top-k 10
first=$(cat "$OUT")
[ "${#first}" -ge 40 ] || fail "generate printed too little"
expect 0 "^ROMEO:" -- generate --threads 1 --ckpt lm.safetensors --prompt "ROMEO:" --max-tokens 40 --seed 5 --top-k 10
[ "$(cat "$OUT")" = "$first" ] || fail "the same seed gave a different text"
expect 0 "^the" -- generate --threads 1 --ckpt lm.safetensors --prompt "the" --max-tokens 20 --temperature 0 \
  --repetition-penalty 1.3 --top-p 0.9
grep -q "^seed" "$OUT" && fail "greedy decoding printed a seed it does not draw with"
expect 0 "^seed [0-9]+ \(pass --seed to repeat this sample\)" -- \
  generate --threads 1 --ckpt lm.safetensors --prompt "the" --max-tokens 5
# a stop character ends the text early: at most 200 tokens, and the output ends with it
expect 0 "." -- generate --threads 1 --ckpt lm.safetensors --prompt "a" --max-tokens 200 --seed 1 --stop "e"
grep -Eq "e$" "$OUT" || fail "--stop e: the text does not end with e"
expect 0 "seed [0-9]+" -- generate --threads 1 --ckpt lm.safetensors --prompt "a" --max-tokens 3

expect 0 "^loss [0-9.]+  perplexity [0-9.]+  accuracy [0-9.]+  \([0-9]+ target tokens of text.txt\)$" -- \
  eval --threads 1 --ckpt lm.safetensors --data text.txt

# seq2seq: reverse short words.
for w in cat dog bird fish horse mouse sheep goat frog duck owl bee ant cow pig hen yak emu elk fox; do
  printf "%s\t%s\n" "$w" "$(echo "$w" | rev)"
done >pairs.tsv
expect 0 "done step 8/8" -- train --threads 1 --model seq2seq --data pairs.tsv --steps 8 --batch 4 --out s2s.safetensors
expect 0 "model +seq2seq" -- info --ckpt s2s.safetensors
grep -Eq "tokenizer.t +char" "$OUT" || fail "info: no target tokenizer"
# The source, " -> ", then its translation; no seed (a seq2seq does not sample).
expect 0 "^cat -> " -- generate --threads 1 --ckpt s2s.safetensors --prompt "cat" --max-tokens 5
grep -q "^seed" "$OUT" && fail "seq2seq decoding printed a seed"
greedy=$(cat "$OUT")
# beam search: width 1 is greedy; a wider beam decodes too
expect 0 "^cat" -- generate --threads 1 --ckpt s2s.safetensors --prompt "cat" --max-tokens 5 --seed 1 --beam 1
[ "$(cat "$OUT")" = "$greedy" ] || fail "--beam 1 differs from greedy decoding"
expect 0 "^cat" -- generate --threads 1 --ckpt s2s.safetensors --prompt "cat" --max-tokens 5 --beam 4 \
  --length-penalty 0.6
expect 2 "--beam 3: beam search is for seq2seq checkpoints" -- \
  generate --threads 1 --ckpt lm.safetensors --prompt "a" --beam 3
expect 0 "^loss [0-9.]+  perplexity" -- eval --threads 1 --ckpt s2s.safetensors --data pairs.tsv

# classifier: does the text contain an "a"?
for w in apple berry cat dog banana kiwi plum fig grape lemon mango melon cherry peach pear lime; do
  case "$w" in *a*) label=yes ;; *) label=no ;; esac
  printf "%s\t%s\n" "$label" "$w"
done >labels.tsv
expect 0 "done step 6/6" -- train --threads 1 --model classifier --data labels.tsv --steps 6 --out cls.safetensors
expect 0 "labels +\[\"no\",\"yes\"\]" -- info --ckpt cls.safetensors
expect 0 "^loss [0-9.]+  perplexity [0-9.]+  accuracy [0-9.]+  \(16 examples of labels.tsv\)$" -- \
  eval --threads 1 --ckpt cls.safetensors --data labels.tsv
expect 1 "cls.safetensors: holds a classifier model: generate needs an lm or seq2seq checkpoint" -- \
  generate --threads 1 --ckpt cls.safetensors --prompt "kiwi"
grep -q "kiwi" "$OUT" && fail "the refusal printed the prompt first"

# lm with a byte-level BPE trained on the data: the tokenizer travels in the checkpoint, and generate decodes
# through it (the same seed, the same text).
expect 0 "done step 6/6" -- train --threads 1 --data text.txt --config tiny.json --steps 6 --tokenizer bpe \
  --vocab-size 300 --out bpe.safetensors
expect 0 "tokenizer +bpe, 300 tokens" -- info --ckpt bpe.safetensors
expect 0 "^the" -- generate --threads 1 --ckpt bpe.safetensors --prompt "the" --max-tokens 20 --seed 3
first=$(cat "$OUT")
expect 0 "^the" -- generate --threads 1 --ckpt bpe.safetensors --prompt "the" --max-tokens 20 --seed 3
[ "$(cat "$OUT")" = "$first" ] || fail "bpe: the same seed gave a different text"
expect 2 "--tokenizer bpe needs --vocab-size" -- train --data text.txt --tokenizer bpe
expect 2 "--vocab-size is for --tokenizer bpe" -- train --data text.txt --vocab-size 300
expect 0 "the BPE tokenizer has [0-9]+ tokens, not the 100000 --vocab-size asked for" -- \
  train --data text.txt --tokenizer bpe --vocab-size 100000 --steps 1 --threads 1 --config tiny.json --out big.safetensors
expect 2 "--tokenizer bpe: only an lm" -- train --model seq2seq --data pairs.tsv --tokenizer bpe --vocab-size 300
expect 2 "--vocab-size: expected a whole number from 257 to 16777216, got \"200\"" -- \
  train --data text.txt --tokenizer bpe --vocab-size 200

# --out is checked before the first step: the data file itself, a missing folder, a folder.
cp text.txt data.txt
expect 2 "--out data.txt is the input data.txt itself" -- train --data data.txt --out data.txt --steps 1 --threads 1
cmp data.txt text.txt || fail "the refused run replaced its data"
expect 2 "--out nowhere/m.safetensors: the folder nowhere does not exist" -- \
  train --data text.txt --out nowhere/m.safetensors --steps 1 --threads 1
grep -q "step" "$OUT" && fail "the run with a bad --out trained before refusing it"
mkdir outdir
expect 2 "--out outdir is a folder: expected the path of the file to write" -- \
  train --data text.txt --out outdir --steps 1 --threads 1

# bench: both tables, briefly.
expect 0 "char GPT train step" -- bench --threads 1 --steps 1 --seconds 0.01
grep -Eq "^512 x 512 x 512 +1 +[0-9.]+ +[0-9.]+$" "$OUT" || fail "bench: no gemm row"
echo "ok"
