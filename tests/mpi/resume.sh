# Checkpoints: rank 0 writes them; a run of 2 ranks resumes on 1 rank (and on 2), continuing the same losses
# as an uninterrupted run of one process.
source "$(dirname "$0")/lib.sh"
make_text text.txt
cat >lm.json <<'JSON'
{"model": {"d_model": 32, "heads": 2, "layers": 2, "context": 32}, "batch": 6}
JSON
args=(--data text.txt --log-every 1)
"$QKV" train --threads 1 "${args[@]}" --config lm.json --steps 30 --eval-every 10 --out full.safetensors >"$OUT" 2>&1 ||
  fail "the uninterrupted run failed"
cp "$OUT" full.txt
grep -E '^step (1[1-9]|2[0-9]|30)/' full.txt >full_11_30.txt
mpi 60 2 "${args[@]}" --config lm.json --steps 30 --eval-every 10 --out two.safetensors
[ "$STATUS" -eq 0 ] || fail "mpirun -np 2 exited with $STATUS"
# Stop the 2-rank run's checkpoint at step 10: train again to 10 steps.
mpi 60 2 "${args[@]}" --config lm.json --steps 10 --eval-every 10 --out ten.safetensors
[ "$STATUS" -eq 0 ] || fail "mpirun -np 2 (10 steps) exited with $STATUS"
cp ten.safetensors ten2.safetensors
# On 1 rank under mpirun, and as a plain process.
mpi 60 1 "${args[@]}" --resume ten.safetensors --steps 30
[ "$STATUS" -eq 0 ] || fail "resuming on 1 rank exited with $STATUS"
grep -q "steps 11..30" "$OUT" || fail "the resumed run did not start at step 11"
cp "$OUT" one_rank.txt
same_losses full_11_30.txt one_rank.txt
# And on 2 ranks again.
mpi 60 2 "${args[@]}" --resume ten2.safetensors --steps 30 --check-replicas
[ "$STATUS" -eq 0 ] || fail "resuming on 2 ranks exited with $STATUS"
same_losses full_11_30.txt "$OUT"
echo "ok: a 2-rank checkpoint resumed on 1 rank and on 2 ranks"


# Stopping a run under mpirun: SIGUSR1 to mpirun, which passes it on to the ranks (on SIGINT and SIGTERM mpirun
# ends the job itself). Every rank stops at the same step (the stop flag is summed with the loss), rank 0 saves
# and exits with 128 + 10, and the checkpoint resumes. (mpirun itself in the background, so that $! is its pid,
# with a watchdog instead of timeout.)
mpirun -np 2 "$QKV" train --threads 1 --data text.txt --config lm.json --steps 100000 --eval-every 0 \
  --log-every 1 --out int.safetensors >int.stdout 2>int.stderr &
pid=$!
# The watchdog ends by itself within 0.1 s of mpirun (no sleeping child left holding ctest's output).
(for _ in $(seq 1 600); do
  sleep 0.1
  kill -0 "$pid" 2>/dev/null || exit 0
done
kill -KILL "$pid" 2>/dev/null) >/dev/null 2>&1 &
watchdog=$!
for _ in $(seq 1 200); do
  grep -q "^step 3/" int.stderr 2>/dev/null && break
  sleep 0.05
done
kill -USR1 "$pid"
status=0
wait "$pid" || status=$?
wait "$watchdog" || true
cat int.stderr int.stdout >"$OUT"
[ "$status" -ne 137 ] || fail "mpirun had to be killed after SIGUSR1"
k=$(sed -nE 's/^interrupted at step ([0-9]+)\/100000.*/\1/p' int.stdout)
[ -n "$k" ] || fail "SIGUSR1 to mpirun: no 'interrupted at step' line"
mpi 60 1 --data text.txt --log-every 1 --resume int.safetensors --steps $((k + 3))
[ "$STATUS" -eq 0 ] || fail "resuming the checkpoint saved on SIGUSR1 exited with $STATUS"
grep -q "steps $((k + 1))..$((k + 3))" "$OUT" || fail "the SIGUSR1 checkpoint is not at step $k"
echo "ok: SIGUSR1 to mpirun stops every rank at step $k with a checkpoint"
