# Faults end the job within bounded time, naming the rank: a rank that raises, a rank that dies (SIGKILL), and
# ranks started with different arguments or data (refused at the start, naming the field).
source "$(dirname "$0")/lib.sh"
make_text text.txt
cat >lm.json <<'JSON'
{"model": {"d_model": 32, "heads": 2, "layers": 1, "context": 32}, "batch": 4}
JSON
args=(--data text.txt --config lm.json --steps 100000 --eval-every 0 --log-every 1)
bounded() {  # bounded SECONDS WHAT: the last mpi call ended by itself, with an error, before its timeout
  [ "$STATUS" -ne 0 ] || fail "$2: the job succeeded"
  [ "$ELAPSED" -le "$1" ] || fail "$2: took ${ELAPSED}s (status $STATUS): it hung"
}
timed() {
  local t0=$SECONDS
  "$@"
  ELAPSED=$((SECONDS - t0))
}

QKV_TEST_FAULT=1:3 timed mpi 60 2 "${args[@]}"
bounded 30 "a rank that raises"
grep -q "qkv train (rank 1 of 2): error: QKV_TEST_FAULT" "$OUT" || fail "the raising rank's error does not name it"
echo "ok: a rank that raises ends the job in ${ELAPSED}s"

QKV_TEST_FAULT=1:3:kill timed mpi 60 2 "${args[@]}"
bounded 30 "a rank that dies"
grep -Eq "process rank 1 .*signal 9" "$OUT" || fail "the job's end does not name the dead rank 1"
echo "ok: a rank that dies ends the job in ${ELAPSED}s"

# MPMD: rank 1 with another --batch, then with another data file.
differ() {
  local t0=$SECONDS
  run_mpi 60 -np 1 "$QKV" train --threads 1 "${args[@]}" : -np 1 "$QKV" train --threads 1 "$@"
  ELAPSED=$((SECONDS - t0))
}
differ "${args[@]}" --batch 8
bounded 30 "a differing --batch"
grep -q "error: the ranks were started differently: --batch is 8 on rank 1 but 4 on rank 0" "$OUT" ||
  fail "a differing --batch is not named"
[ "$(grep -c 'started differently' "$OUT")" -eq 1 ] || fail "the refusal must be said once"

head -c -100 text.txt >short.txt
differ --data short.txt --config lm.json --steps 100000 --eval-every 0 --log-every 1
bounded 30 "differing data"
grep -q "error: the ranks were started differently: --data (bytes, crc32) is" "$OUT" ||
  fail "differing data is not named"

# --batch smaller than the ranks.
mpi 60 2 --data text.txt --config lm.json --steps 5 --batch 1
bounded 30 "--batch 1 on 2 ranks"
grep -q "error: --batch 1 is smaller than the 2 ranks" "$OUT" || fail "--batch 1 on 2 ranks is not refused"
echo "ok: ranks started differently are refused, naming the field"
