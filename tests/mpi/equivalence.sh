# N ranks with a global batch G follow one process with batch G: the same losses (1e-6 relative) for 50 steps
# for each model, the parameters bitwise identical on every rank after every step (--check-replicas: a hash of
# them all-reduced), and the same checkpoint after the same steps. 2 ranks, and 3 with an uneven split.
source "$(dirname "$0")/lib.sh"
make_text text.txt
make_tsv seq2seq pairs.tsv
make_tsv classifier labels.tsv
cat >lm.json <<'JSON'
{"model": {"d_model": 32, "heads": 2, "layers": 2, "context": 32}, "batch": 8}
JSON
cat >s2s.json <<'JSON'
{"model": {"d_model": 32, "heads": 2, "encoder_layers": 1, "decoder_layers": 2, "d_ff": 64}, "batch": 8}
JSON
cat >cls.json <<'JSON'
{"model": {"d_model": 32, "heads": 2, "layers": 2, "d_ff": 64}, "batch": 8}
JSON
for case in "lm text.txt lm.json" "seq2seq pairs.tsv s2s.json" "classifier labels.tsv cls.json"; do
  read -r model data config <<<"$case"
  args=(--model "$model" --data "$data" --config "$config" --steps 50 --log-every 1 --eval-every 25)
  "$QKV" train --threads 1 "${args[@]}" --out one.safetensors >"$OUT" 2>&1 || fail "$model: one process failed"
  cp "$OUT" one.txt
  for np in 2 3; do
    mpi 60 "$np" "${args[@]}" --out n.safetensors --check-replicas --bucket-mb 0.01
    [ "$STATUS" -eq 0 ] || fail "$model: mpirun -np $np exited with $STATUS"
    grep -q "data parallel over mpi ($np ranks)" "$OUT" || fail "$model: -np $np did not run data parallel"
    [ "$(grep -c '^step 50/50' "$OUT")" -eq 1 ] || fail "$model: -np $np: rank 0 alone must log"
    cp "$OUT" n.txt
    same_losses one.txt n.txt
    # The evaluations (rank 0's, on the replica) agree too.
    diff <(grep '^eval' one.txt | cut -c1-30) <(grep '^eval' n.txt | cut -c1-30) >&2 ||
      fail "$model: -np $np: the evaluation losses differ"
    "$QKV" info --ckpt n.safetensors >"$OUT" 2>&1 || fail "$model: -np $np: the checkpoint does not load"
    grep -Eq "^step +50 " "$OUT" || fail "$model: -np $np: no checkpoint at step 50"
  done
  echo "ok: $model, 1 process vs 2 and 3 ranks, 50 steps"
done
