# ZeRO-1 (--zero 1: each rank keeps 1/N of the Adam moments and the parameters are all-gathered after each step)
# gives the same bits as plain data parallelism: the same losses and byte-identical checkpoints (moments
# gathered for the save), for an lm and a seq2seq, on 2 and 3 ranks; and its checkpoints resume anywhere.
source "$(dirname "$0")/lib.sh"
make_text text.txt
make_tsv seq2seq pairs.tsv
cat >lm.json <<'JSON'
{"model": {"d_model": 32, "heads": 2, "layers": 2, "context": 32}, "batch": 6}
JSON
cat >s2s.json <<'JSON'
{"model": {"d_model": 32, "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "d_ff": 64}, "batch": 6}
JSON
for case in "lm text.txt lm.json" "seq2seq pairs.tsv s2s.json"; do
  read -r model data config <<<"$case"
  args=(--model "$model" --data "$data" --config "$config" --steps 20 --log-every 1 --eval-every 10)
  for np in 2 3; do
    mpi 60 "$np" "${args[@]}" --out plain.safetensors
    [ "$STATUS" -eq 0 ] || fail "$model: plain -np $np exited with $STATUS"
    cp "$OUT" plain.txt
    mpi 60 "$np" "${args[@]}" --out zero.safetensors --zero 1 --check-replicas
    [ "$STATUS" -eq 0 ] || fail "$model: --zero 1 -np $np exited with $STATUS"
    grep -q "ZeRO-1: Adam moments" "$OUT" || fail "$model: --zero 1 does not report the memory it saves"
    diff <(losses plain.txt) <(losses "$OUT") >&2 || fail "$model: -np $np: --zero 1 changed the losses"
    cmp plain.safetensors zero.safetensors || fail "$model: -np $np: --zero 1 wrote a different checkpoint"
  done
  echo "ok: $model, --zero 1 = plain on 2 and 3 ranks (losses and checkpoint bytes)"
done
# A ZeRO-1 checkpoint (at step 10) resumes as a plain process and again under ZeRO-1 on 2 ranks.
args=(--data text.txt --config lm.json --log-every 1)
"$QKV" train --threads 1 "${args[@]}" --steps 20 --eval-every 10 --out full.safetensors >"$OUT" 2>&1 || fail "full run"
grep -E '^step (1[1-9]|20)/' "$OUT" >full_11_20.txt
mpi 60 2 "${args[@]}" --steps 10 --eval-every 10 --zero 1 --out ten.safetensors
[ "$STATUS" -eq 0 ] || fail "--zero 1 (10 steps) exited with $STATUS"
cp ten.safetensors ten2.safetensors
"$QKV" train --threads 1 --data text.txt --log-every 1 --resume ten.safetensors --steps 20 >"$OUT" 2>&1 ||
  fail "resuming a ZeRO-1 checkpoint in one process failed"
same_losses full_11_20.txt "$OUT"
mpi 60 2 --data text.txt --log-every 1 --resume ten2.safetensors --steps 20 --zero 1 --check-replicas
[ "$STATUS" -eq 0 ] || fail "resuming under --zero 1 exited with $STATUS"
same_losses full_11_20.txt "$OUT"
echo "ok: a ZeRO-1 checkpoint resumes in one process and under ZeRO-1"
