#!/bin/bash
# One short GPU session (issue 34) with binaries built HERE, so that the lent machine's minutes go to running, not
# compiling. Here (the native preset builds the CUDA objects for sm_90 when nvcc is installed):
#   cmake --build build/native && bash bench/cuda_session.sh --pack      # copies the binaries into .devbin/
# then, through the device tool, with carry [".devbin"]:
#   bash bench/cuda_session.sh                                           # logs.tgz and summary.txt under $OUT
# Phase A runs the GPU test groups side by side (correctness only; each under `timeout`), and compute-sanitizer
# memcheck and racecheck beside them; phase B, alone on the card, the training table (qkv, PyTorch eager, then
# torch.compile while the time lasts), the ops table and the A/Bs. CUDA_SESSION_SECONDS (default 380) bounds the
# whole; a stage that would start after it is skipped and says so. For a second session that completes the first:
# CUDA_SESSION_TABLE=0 skips qkv's and PyTorch eager's rows, the A/Bs and the ops table (CUDA_SESSION_BENCHES: the
# models of those rows, default "char-gpt seq2seq"; CUDA_SESSION_AB=0: no A/B rows; CUDA_SESSION_OPS=0: no ops
# table); CUDA_SESSION_COMPILE lists the torch.compile rows ("char-gpt:tf32 seq2seq:bf16 ..."; default all six);
# CUDA_SESSION_MEMCHECK and CUDA_SESSION_RACECHECK replace the sanitizers' gtest filters (empty: skipped), and
# CUDA_SESSION_MEMCHECK_EACH / CUDA_SESSION_RACECHECK_EACH run one sanitizer process per space-separated filter, side
# by side; CUDA_SESSION_SHARE (45) is phase A's percentage of the time. If the carried binaries cannot start there (a
# library missing), it builds the three targets there with bench/cuda_carry.sh's headers, if carried.
set -uo pipefail
cd "$(dirname "$0")/.."
bins=(tests/cpp/qkv_tests bench/qkv_cuda_train bench/qkv_cuda_bench)
if [ "${1:-}" = --pack ]; then
  rm -rf .devbin && mkdir -p .devbin
  grep -qx "/.devbin/" .git/info/exclude 2>/dev/null || echo "/.devbin/" >>.git/info/exclude
  for b in "${bins[@]}"; do strip -o ".devbin/$(basename "$b")" "build/native/$b"; done
  du -sh .devbin
  exit 0
fi

budget="${CUDA_SESSION_SECONDS:-380}"
t0=$(date +%s)
out="${OUT:-build/cuda-session}"
logs=/tmp/qkv-logs
rm -rf "$logs" && mkdir -p "$logs" "$out"
left() { echo $((budget - ($(date +%s) - t0))); }
say() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$logs/summary.txt"; }

# The tests read their fixtures at the source path compiled in here (/work/main/tests/fixtures).
here="$PWD"
if [ ! -e /work/main ]; then mkdir -p /work && ln -s "$here" /work/main; fi

# Libraries: NCCL and the CUDA runtime are linked; cuBLAS is opened on first use. Look where the image keeps them.
libdirs=/usr/local/cuda/lib64:/usr/local/cuda/lib
for d in $(python3 -c 'import nvidia, os; [print(os.path.join(p, q, "lib")) for p in nvidia.__path__ for q in os.listdir(p)]' 2>/dev/null); do
  [ -d "$d" ] && libdirs="$libdirs:$d"
done
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee -a "$logs/summary.txt"
nproc | sed 's/^/cpus: /' | tee -a "$logs/summary.txt"

bin=.devbin
if ! ldd "$bin/qkv_tests" 2>&1 | tee "$logs/ldd.txt" | grep -q "not found" && "$bin/qkv_tests" --gtest_list_tests >/dev/null 2>&1; then
  say "carried binaries start"
else
  say "carried binaries do not start ($(grep 'not found' "$logs/ldd.txt" | tr -s ' \t' ' ')): building here"
  extra=()
  [ -d .carry/usr ] && extra=(-DQKV_SYSTEM_INCLUDE="$PWD/.carry/usr/include" -DCMAKE_PREFIX_PATH="$PWD/.carry/usr")
  cmake --preset cuda -G Ninja "${extra[@]}" >"$logs/configure.log" 2>&1 &&
    cmake --build build/cuda -j 16 --target qkv_tests qkv_cuda_train qkv_cuda_bench >"$logs/build.log" 2>&1 ||
    { say "build failed"; tail -20 "$logs/build.log"; }
  mkdir -p .devbin-built && for b in "${bins[@]}"; do cp "build/cuda/$b" .devbin-built/; done
  bin=.devbin-built
  say "built"
fi
tests="$bin/qkv_tests"

# --- Phase A: correctness, the groups side by side -------------------------------------------------------------
group() {  # name seconds env... -- filter
  local name=$1 secs=$2
  shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout -k 5 "$secs" "$tests" --gtest_filter="$1" >"$logs/test_$name.log" 2>&1
  echo "$?" >"$logs/test_$name.rc"
}
a_secs=$(($(left) * ${CUDA_SESSION_SHARE:-45} / 100))
say "phase A: test groups and sanitizers, ${a_secs} s each at most"
group ops "$a_secs" -- 'CudaOps.*:CudaGraph.*:CudaQuantOps.*:Device.*:CudaHost.*:CudaQuantHost.*' &
group flash "$a_secs" -- 'CudaFlashAttention.*' &
group flash_sync "$a_secs" QKV_CUDA_SYNC=1 -- 'CudaOps.Attention*:CudaFlashAttention.*' &
group models "$a_secs" -- 'CudaStepGraph.*:BackendOps.*:ModelDevice*:Quantize.OnCuda*:Lora.OnCuda*:PretrainedKeepCuda.*' &
group parity "$a_secs" -- 'ParityModelsCuda.*:Gpt2ParityCuda.*' &
group parity_no_graph "$a_secs" QKV_CUDA_GRAPH=0 -- 'ModelDeviceCuda.*:ParityModelsCuda.*' &
group lora "$a_secs" -- 'LoraParityCuda.*' &
group nccl "$a_secs" -- 'NcclCommunicator.*' &
sanitize() {  # tool filter [name suffix]
  local name="sanitize_$1${3:+_$3}"
  timeout -k 5 "$a_secs" compute-sanitizer --tool "$1" --error-exitcode 3 "$tests" --gtest_filter="$2" \
    >"$logs/$name.log" 2>&1
  echo "$?" >"$logs/$name.rc"
}
memcheck="${CUDA_SESSION_MEMCHECK-CudaOps.*:ModelDeviceCuda.*:CudaStepGraph.*:-CudaOps.Gemm*:CudaOps.AnInjected*}"
racecheck="${CUDA_SESSION_RACECHECK-CudaOps.LayerNorm*:CudaOps.CrossEntropy*:CudaFlashAttention.*:ModelDeviceCuda.*}"
if command -v compute-sanitizer >/dev/null; then
  [ -n "$memcheck" ] && sanitize memcheck "$memcheck" &
  [ -n "$racecheck" ] && sanitize racecheck "$racecheck" &
  # CUDA_SESSION_MEMCHECK_EACH / CUDA_SESSION_RACECHECK_EACH: space-separated gtest filters, each in its own
  # sanitizer process beside the others (the tools run the model tests 10-50x slower, mostly on the host's cores:
  # one process per slow test finishes in the slowest one's time; sanitize_<tool>_<n>.log).
  set -f  # the filters' * are gtest's, not the shell's
  i=0
  for f in ${CUDA_SESSION_MEMCHECK_EACH:-}; do i=$((i + 1)); sanitize memcheck "$f" "$i" & done
  i=0
  for f in ${CUDA_SESSION_RACECHECK_EACH:-}; do i=$((i + 1)); sanitize racecheck "$f" "$i" & done
  set +f
else
  say "compute-sanitizer: not installed"
fi
wait
for f in "$logs"/test_*.rc "$logs"/sanitize_*.rc; do
  [ -e "$f" ] || continue
  n=$(basename "$f" .rc) l="$logs/$(basename "$f" .rc).log"
  say "$n: rc $(cat "$f"); $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]|ERROR SUMMARY|RACECHECK SUMMARY' "$l" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Z]' "$l" | sort -u | head -20 | tee -a "$logs/summary.txt"
  [ "$(cat "$f")" = 124 ] && say "  $n timed out in: $(grep -E '^\[ RUN      \]' "$l" | tail -1)"
done

# --- Phase B: timings, alone on the card ------------------------------------------------------------------------
steps="${CUDA_BENCH_STEPS:-30}" warmup="${CUDA_BENCH_WARMUP:-5}"
train() {  # log args...
  local log=$1
  shift
  [ "$(left)" -gt 15 ] || { say "skipped (time): $*"; return; }
  timeout -k 5 60 "$@" --steps "$steps" --warmup "$warmup" >>"$logs/$log" 2>&1 || say "failed ($?): $* (see $log)"
}
# CUDA_SESSION_PROFILE lists profile stages ("all" = every one; default none), run before the table:
#   char-gpt  where a char GPT step's GPU time goes, by kernel, qkv (Nsight Compute's durations over one warm-up and
#             two timed runs of one step, op by op: 3 steps) beside PyTorch eager (torch.profiler over 5 steps), in
#             each precision of CUDA_SESSION_PROFILE_PRECISIONS (default "tf32 fp32 bf16");
#   s2s-lt    the Seq2Seq fp32 step with and without cuBLASLt's epilogues (QKV_CUDA_LT=0);
#   ncu-ops   the ops bench under Nsight Compute's full metric list (ncu_ops.txt: each kernel against its floor).
# Clocks as the card has them (--clock-control none).
profile="${CUDA_SESSION_PROFILE:-}"
[ "$profile" = all ] && profile="char-gpt s2s-lt ncu-ops"
if [[ " $profile " == *" char-gpt "* ]]; then
  if command -v ncu >/dev/null; then
    for p in ${CUDA_SESSION_PROFILE_PRECISIONS:-tf32 fp32 bf16}; do
      [ "$(left)" -gt 45 ] || { say "profile $p: skipped (time)"; continue; }
      QKV_CUDA_GRAPH=0 timeout -k 5 60 ncu --csv --page raw --print-units base --clock-control none \
        --metrics gpu__time_duration.sum "$bin/qkv_cuda_train" char-gpt --device cuda --precision "$p" --steps 1 \
        --warmup 1 >"$logs/ncu_train_$p.csv" 2>"$logs/ncu_train_$p.log" || say "ncu char-gpt $p: rc $?"
      python3 bench/cuda_ncu.py "$logs/ncu_train_$p.csv" 3 >"$logs/ncu_train_$p.txt" 2>&1
      say "qkv $p: $(grep -m1 'steps profiled' "$logs/ncu_train_$p.txt")"
      timeout -k 5 60 python3 bench/cuda_torch.py char-gpt --precision "$p" --mode eager --steps 5 --warmup 5 \
        --profile >"$logs/torch_profile_$p.txt" 2>&1 || say "torch profile $p: rc $?"
      say "torch $p: $(grep -m1 'GPU time per step' "$logs/torch_profile_$p.txt" | sed 's/.*, //')"
    done
  else
    say "ncu: not installed; the profile stage is skipped"
  fi
fi
if [[ " $profile " == *" s2s-lt "* ]]; then
  train train_s2s_lt.log "$bin/qkv_cuda_train" seq2seq --device cuda --precision fp32
  train train_s2s_no_lt.log env QKV_CUDA_LT=0 "$bin/qkv_cuda_train" seq2seq --device cuda --precision fp32
  say "seq2seq fp32 with cuBLASLt epilogues / QKV_CUDA_LT=0: $(grep -h -o 'ms_per_step=[0-9.]*' \
    "$logs/train_s2s_lt.log" "$logs/train_s2s_no_lt.log" | tr '\n' ' ')"
fi
if [[ " $profile " == *" ncu-ops "* ]]; then
  if command -v ncu >/dev/null && [ "$(left)" -gt 40 ]; then
    timeout -k 5 $(($(left) > 120 ? 100 : $(left) - 20)) ncu --csv --page raw --print-units base --clock-control none \
      --metrics "$(python3 bench/cuda_ncu.py --metrics)" "$bin/qkv_cuda_bench" --reps 1 >"$logs/ncu_ops.csv" \
      2>"$logs/ncu_ops.log" || say "ncu ops: rc $?"
    python3 bench/cuda_ncu.py "$logs/ncu_ops.csv" >"$logs/ncu_ops.txt" 2>&1
  fi
fi
say "phase B: training table"
table="${CUDA_SESSION_TABLE:-1}"
[ "$table" = 1 ] && for b in ${CUDA_SESSION_BENCHES:-char-gpt seq2seq}; do
  for p in fp32 tf32 bf16; do
    train qkv_train.log "$bin/qkv_cuda_train" "$b" --device cuda --precision "$p"
    train torch.log python3 bench/cuda_torch.py "$b" --precision "$p" --mode eager
  done
done
[ "$table" = 1 ] && [ "${CUDA_SESSION_AB:-1}" = 1 ] && train train_rowwise.log env QKV_CUDA_ATTENTION=rowwise "$bin/qkv_cuda_train" char-gpt --device cuda --precision fp32
[ "$table" = 1 ] && [ "${CUDA_SESSION_AB:-1}" = 1 ] && train train_no_lt.log env QKV_CUDA_LT=0 "$bin/qkv_cuda_train" char-gpt --device cuda --precision fp32
[ "$table" = 1 ] && [ "${CUDA_SESSION_AB:-1}" = 1 ] && train train_no_graph.log env QKV_CUDA_GRAPH=0 "$bin/qkv_cuda_train" char-gpt --device cuda --precision fp32
if [ "$table" = 1 ] && [ "${CUDA_SESSION_OPS:-1}" = 1 ] && [ "$(left)" -gt 30 ]; then
  timeout -k 5 $(($(left) > 90 ? 60 : $(left) - 20)) "$bin/qkv_cuda_bench" >"$logs/ops.log" 2>&1 || say "ops bench: rc $?"
fi
for bp in ${CUDA_SESSION_COMPILE:-char-gpt:tf32 char-gpt:bf16 seq2seq:tf32 char-gpt:fp32 seq2seq:bf16 seq2seq:fp32}; do
  set -- ${bp/:/ }
  [ "$(left)" -gt 70 ] || { say "torch.compile $1 $2: skipped (time)"; continue; }
  timeout -k 5 $(($(left) - 10)) python3 bench/cuda_torch.py "$1" --precision "$2" --mode compile --steps "$steps" \
    --warmup "$warmup" >>"$logs/torch.log" 2>&1 || say "torch.compile $1 $2: rc $?"
done
python3 bench/cuda_report.py "$logs" 2>&1 | tee "$logs/report.txt"
grep -v '^RESULT' "$logs/ops.log" 2>/dev/null | tail -40
say "done"
tar czf "$out/logs.tgz" -C /tmp qkv-logs
cp "$logs/summary.txt" "$out/"
cat "$logs/summary.txt"
