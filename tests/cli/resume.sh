# --resume continues with the same loss trajectory as an uninterrupted run: after a run that stopped at
# --steps, and after Ctrl-C (SIGINT) in the middle of a run.
source "$(dirname "$0")/lib.sh"
make_text text.txt
train() { "$QKV" train --data text.txt --threads 1 --log-every 1 "$@"; }
fresh() { train --config tiny.json "$@"; }

# Uninterrupted: 24 steps, evaluating every 6.
fresh --steps 24 --eval-every 6 --out full.safetensors >full.txt 2>full.err || fail "uninterrupted run failed"
# The same in two runs: 10 steps, then resume to 24.
fresh --steps 10 --eval-every 6 --out part.safetensors >part1.txt 2>&1 || fail "first part failed"
train --resume part.safetensors --steps 24 >part2.txt 2>part2.err || { cp part2.err "$OUT"; fail "resumed run failed"; }
grep -q "steps 11..24" part2.err || { cp part2.err "$OUT"; fail "the resumed run did not start at step 11"; }
diff <(grep -E "^(eval step (12|18|24)|done)" full.txt | sed 's/full.safetensors/X/') \
  <(grep -E "^(eval step|done)" part2.txt | sed 's/part.safetensors/X/') ||
  fail "the resumed run's losses differ from the uninterrupted run's"
# The progress lines (per-step training losses) agree too.
diff <(grep -E "^step (1[1-9]|2[0-4])/" full.err | cut -d" " -f1-5) <(grep -E "^step " part2.err | cut -d" " -f1-5) ||
  fail "the resumed run's training losses differ"

# Ctrl-C: a long run is interrupted once it has taken a few steps; it saves and exits with 130.
# (qkv itself in the background, not a shell function: $! must be its pid)
"$QKV" train --data text.txt --threads 1 --log-every 1 --config tiny.json --steps 100000 --eval-every 0 \
  --out int.safetensors >int.txt 2>int.err &
pid=$!
for _ in $(seq 1 200); do
  grep -q "^step 3/" int.err 2>/dev/null && break
  sleep 0.05
done
kill -INT "$pid"
status=0
wait "$pid" || status=$?
cp int.txt "$OUT"
[ "$status" -eq 130 ] || fail "the interrupted run exited with $status, expected 130"
k=$(sed -nE 's/^interrupted at step ([0-9]+)\/100000.*/\1/p' int.txt)
[ -n "$k" ] || fail "no 'interrupted at step' line"
"$QKV" info --ckpt int.safetensors >"$OUT" 2>&1 || fail "the checkpoint saved on Ctrl-C does not load"
grep -Eq "^step +$k " "$OUT" || fail "the checkpoint is not at step $k"
total=$((k + 6))
train --resume int.safetensors --steps "$total" >resumed.txt 2>&1 || fail "resuming after Ctrl-C failed"
fresh --steps "$total" --eval-every 0 --out straight.safetensors >straight.txt 2>&1 || fail "straight run failed"
a=$(grep "^done" resumed.txt | sed 's/, checkpoint.*//')
b=$(grep "^done" straight.txt | sed 's/, checkpoint.*//')
[ -n "$a" ] && [ "$a" = "$b" ] || { cp resumed.txt "$OUT"; fail "after Ctrl-C: '$a' != uninterrupted '$b'"; }
echo "ok (interrupted at step $k; $a)"
