# The qkv tool refuses bad files with exit status 1 and a message naming the file (and line).
source "$(dirname "$0")/lib.sh"
make_text text.txt

# Unreadable paths.
expect 1 "missing.txt: cannot open for reading" -- train --data missing.txt
mkdir folder
expect 1 "folder: is a directory" -- train --data folder
expect 1 "missing.safetensors: cannot open" -- info --ckpt missing.safetensors
expect 1 "missing.safetensors: cannot open" -- generate --ckpt missing.safetensors --prompt a
if [ "$(id -u)" -ne 0 ]; then  # root reads files whatever their mode
  cp text.txt locked.txt && chmod 000 locked.txt
  expect 1 "locked.txt: cannot open for reading \(Permission denied\)" -- train --data locked.txt
fi

# A text file cut in the middle of a UTF-8 character; an empty file.
{ head -c 300 text.txt; printf '\xc3'; } >truncated.txt
expect 1 "truncated.txt:[0-9]+: invalid UTF-8 at byte 300" -- train --data truncated.txt
: >empty.txt
expect 1 "empty.txt: the file is empty" -- train --data empty.txt
printf "short" >short.txt
expect 1 "short.txt: the training split .* expected at least context \+ 1" -- train --data short.txt

# TSV files with a bad line.
printf "cat\ttac\ndog\tgod\nbird tsal\nfish\thsif\n" >bad.tsv
expect 1 "bad.tsv:3: no tab in \"bird tsal\": expected source<TAB>target" -- train --model seq2seq --data bad.tsv
printf "yes\tapple\nno\tkiwi\nyes\tbanana\textra\n" >bad_labels.tsv
expect 1 "bad_labels.tsv:3: more than one tab .* expected label<TAB>text" -- \
  train --model classifier --data bad_labels.tsv
printf "yes\tapple\n\tkiwi\n" >empty_label.tsv
expect 1 "empty_label.tsv:2: the label is empty" -- train --model classifier --data empty_label.tsv

# Bad --config files.
echo '{"model": {"layers": 1}, "epochs": 3}' >unknown.json
expect 1 "unknown.json: unknown key \"epochs\"" -- train --data text.txt --config unknown.json
echo '{"model": {"d_model": 30, "heads": 4}}' >indivisible.json
expect 1 "indivisible.json: d_model = 30 must be divisible by heads = 4" -- \
  train --data text.txt --config indivisible.json
echo '{"model": {"vocab_size": 10}}' >vocab.json
expect 1 "vocab.json: model.vocab_size is set from the data" -- train --data text.txt --config vocab.json
echo '{"model": ' >broken.json
expect 1 "broken.json: not valid JSON" -- train --data text.txt --config broken.json

# Checkpoints: another model's, a truncated one, something that is not a checkpoint.
for w in cat dog bird fish; do printf "%s\t%s\n" "$w" "$(echo "$w" | rev)"; done >pairs.tsv
expect 0 "done" -- train --threads 1 --model seq2seq --data pairs.tsv --steps 2 --out s2s.safetensors
expect 1 "text.txt:1: no tab .* \[s2s.safetensors holds a seq2seq model, which reads TSV lines source<TAB>target\]" -- \
  eval --ckpt s2s.safetensors --data text.txt
expect 1 "s2s.safetensors: holds a seq2seq model, but --model lm was given" -- \
  train --model lm --data text.txt --resume s2s.safetensors
head -c 1000 s2s.safetensors >cut.safetensors
expect 1 "cut.safetensors: .*" -- info --ckpt cut.safetensors
expect 1 "cut.safetensors: .*" -- generate --ckpt cut.safetensors --prompt a
expect 1 "text.txt: .*safetensors" -- info --ckpt text.txt
expect 1 "text.txt: " -- eval --ckpt text.txt --data text.txt
echo "ok"
