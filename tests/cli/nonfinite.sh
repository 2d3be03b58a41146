# --non-finite: by default a NaN or infinite loss stops training (status 1, the last checkpoint kept); with
# skip such steps are reported, counted and leave the model as it was, and --resume continues with the
# batches after every step taken or skipped.
source "$(dirname "$0")/lib.sh"
make_text text.txt
# lr 1e30: the first update throws the weights to ~1e30, and every forward pass after it overflows.
cat >huge.json <<'JSON'
{"model": {"d_model": 32, "heads": 2, "layers": 1, "context": 32}, "batch": 4, "optimizer": {"lr": 1e30}}
JSON
train() { "$QKV" train --data text.txt --threads 1 --log-every 1 "$@"; }

# The default (error): step 1's evaluation is not finite, and that checkpoint is not saved (a model whose every
# forward overflows is no checkpoint to keep); without an evaluation first, step 2's loss stops the run.
expect 1 "eval step 1: the held-out loss is not finite \(evaluate: the loss is -?nan, not finite: .*this step's checkpoint was not saved" -- \
  train --data text.txt --threads 1 --config huge.json --steps 4 --eval-every 1 --out h.safetensors
[ ! -e h.safetensors ] || fail "a checkpoint whose evaluation is not finite was saved"
expect 1 "the loss is not finite \((-?nan|-?inf)\); no gradient was accumulated and the weights are unchanged" -- \
  train --data text.txt --threads 1 --config huge.json --steps 4 --eval-every 0 --out h.safetensors
[ ! -e h.safetensors ] || fail "the run stopped at step 2 saved a checkpoint"
# With skip, step 1's checkpoint is saved all the same, said so; qkv eval on it fails naming the file.
expect 0 "eval step 1: the held-out loss is not finite; saved anyway \(--non-finite skip\)" -- \
  train --data text.txt --threads 1 --config huge.json --steps 1 --eval-every 1 --non-finite skip --out h.safetensors
expect 0 "^step +1 \(with optimizer state\)$" -- info --ckpt h.safetensors
expect 1 "h.safetensors: evaluate: the loss is -?nan, not finite: the model's weights overflow or hold NaN" -- \
  eval --ckpt h.safetensors --data text.txt --threads 1

# Resumed with --non-finite skip: steps 2..4 are skipped, reported, counted; the weights stay at step 1's.
train --resume h.safetensors --non-finite skip --steps 4 >skip.txt 2>skip.err || { cp skip.err "$OUT"; fail "resume with skip failed"; }
cat skip.txt skip.err >"$OUT"
grep -q "steps 2..4" skip.err || fail "the resumed run did not start at step 2"
[ "$(grep -Ec '^step [234] skipped: the loss is not finite; the weights are unchanged \([123] skipped so far\)$' skip.err)" -eq 3 ] ||
  fail "expected a 'skipped' line for each of steps 2, 3 and 4"
grep -q "^done step 4/4: loss -\?\(nan\|inf\)" skip.txt || fail "no done line"
grep -q "^3 steps were skipped for a non-finite loss or gradient" skip.err || fail "no summary of the skipped steps"
expect 0 "^step +1 \(with optimizer state\); 3 skipped \(non-finite\)$" -- info --ckpt h.safetensors
grep -q '"non_finite":"skip"' "$OUT" || fail "info: the optimizer config does not say non_finite skip"

# Resumed again: the next batch is step 5 (1 taken + 3 skipped), and the policy came from the checkpoint.
train --resume h.safetensors --steps 6 >again.txt 2>again.err || { cp again.err "$OUT"; fail "second resume failed"; }
cat again.txt again.err >"$OUT"
grep -q "steps 5..6" again.err || fail "the second resumed run did not start at step 5"
grep -q "^5 steps were skipped" again.err || fail "the count did not continue from the checkpoint"

# A fresh run with the flag: the same as "non_finite": "skip" in the config.
expect 0 "^done step 3/3" -- train --data text.txt --threads 1 --config huge.json --steps 3 --non-finite skip \
  --out f.safetensors
grep -q "^2 steps were skipped" "$OUT" || fail "a fresh run with --non-finite skip did not skip steps 2 and 3"

# A good run with skip: nothing to report, exactly the losses of the default.
expect 0 "^done step 5/5" -- train --data text.txt --threads 1 --config tiny.json --steps 5 --non-finite skip --out g.safetensors
skip_done=$(grep "^done" "$OUT" | sed 's/, checkpoint.*//')
grep -q "skipped" "$OUT" && fail "a run without faults reported skipped steps"
expect 0 "^done step 5/5" -- train --data text.txt --threads 1 --config tiny.json --steps 5 --out e.safetensors
[ "$(grep "^done" "$OUT" | sed 's/, checkpoint.*//')" = "$skip_done" ] || fail "skip changed a run without faults"

# Bad values: a usage error naming the flag; in a config file, the field.
expect 2 "--non-finite: foo not in \{error,skip\}" -- train --data text.txt --non-finite foo
echo '{"optimizer": {"non_finite": "sometimes"}}' >bad.json
expect 1 'optimizer.non_finite = "sometimes" is unknown: expected "error" or "skip"' -- \
  train --data text.txt --config bad.json --steps 1
expect 0 "--non-finite" -- train --help
echo ok
