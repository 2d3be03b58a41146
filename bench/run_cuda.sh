#!/bin/bash
# The CUDA checks and benchmarks, in one command on the lent GPU machine (issues 9 and 22). Prepare here first with
# bench/cuda_carry.sh, then, through the device tool, with carry [".carry"]:
#   bash bench/run_cuda.sh            # build, CUDA tests, ops, training qkv vs PyTorch; logs under $OUT (or build/cuda/bench-cuda)
# Variables: CUDA_BENCH_ONLY="tests ops ncu train torch" (default; add "sanitize" for compute-sanitizer memcheck and
# racecheck over the CUDA op tests, a few minutes), CUDA_BENCH_STEPS (50 timed training steps), CUDA_BENCH_WARMUP
# (10), CUDA_BENCH_JOBS (16).
#
# What it runs:
#   1. configure + build the `cuda` preset (sm_90 + PTX) with the carried headers and GoogleTest;
#   2. the CUDA tests: every CUDA op against the CPU op (tests/cpp/cuda), then the whole suite once (the CPU
#      tests must still pass in a CUDA build);
#   3. qkv_cuda_bench: each CUDA op at the char GPT's shapes against its floor (copy bandwidth, matrix rate); then
#      ("ncu") the same bench once more under Nsight Compute (a few launches per kernel), summarised per kernel by
#      bench/cuda_ncu.py: DRAM and compute-pipe shares of peak, occupancy, the bound (ncu_summary.txt);
#   4. training, qkv ("train": build/cuda/bench/qkv_cuda_train, models on Device::CUDA) beside PyTorch eager and
#      torch.compile ("torch": bench/cuda_torch.py --mode eager|compile), one process per (model, precision, side),
#      back to back: the char GPT (6 layers, 6 heads, 384 wide, context 256, batch 64) and the tutorial Seq2Seq
#      (d_model 512, 8 heads, 6+6 layers, batch 64, length 100), fp32, tf32 and bf16 (qkv's --precision bf16 beside
#      PyTorch's autocast); then bench/cuda_report.py prints each row's ms/step, tokens/s and MFU per side and
#      qkv / eager, qkv / compiled (bench/README.md, "CUDA").
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-build/cuda/bench-cuda}"
mkdir -p "$out"
only="${CUDA_BENCH_ONLY:-tests ops ncu train torch}"
steps="${CUDA_BENCH_STEPS:-50}"
warmup="${CUDA_BENCH_WARMUP:-10}"
jobs="${CUDA_BENCH_JOBS:-16}"
status=0

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$out/gpu.txt"
nvcc --version | tail -2

if [[ " $only " == *" tests "* || " $only " == *" ops "* || " $only " == *" ncu "* || " $only " == *" sanitize "* ||
  " $only " == *" train "* ]]; then
  extra=()
  if [ -d .carry/usr ]; then
    extra=(-DQKV_SYSTEM_INCLUDE="$PWD/.carry/usr/include" -DCMAKE_PREFIX_PATH="$PWD/.carry/usr")
  fi
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  t0=$(date +%s)
  if cmake --preset cuda "${gen[@]}" "${extra[@]}" >"$out/configure.log" 2>&1 &&
    cmake --build build/cuda -j "$jobs" >"$out/build.log" 2>&1; then
    echo "build: $(( $(date +%s) - t0 )) s"
    # Warnings from nvcc or the host compiler, if any (the build is meant to have none).
    grep -iE "warning" "$out/build.log" | head -20
    if [[ " $only " == *" tests "* ]]; then
      # The CUDA ops against the CPU ops, every op against the reference (BackendOps), and the models on the GPU
      # against the CPU and PyTorch (ModelDeviceCuda, ParityModelsCuda), and the NCCL communicator on one rank.
      build/cuda/tests/cpp/qkv_tests --gtest_filter='Cuda*:Device*:BackendOps*:ModelDevice*:ParityModelsCuda*:Gpt2ParityCuda*:Nccl*' 2>&1 |
        tee "$out/cuda_tests.log" | tail -40
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      QKV_CUDA_SYNC=1 build/cuda/tests/cpp/qkv_tests --gtest_filter='CudaOps.Attention*:CudaFlashAttention.*' >"$out/cuda_tests_sync.log" 2>&1 ||
        { echo "attention tests failed with QKV_CUDA_SYNC=1 (see cuda_tests_sync.log)"; status=1; }
      # The models' GPU tests train through the step graph by default (exec/cuda/step_graph.h); op by op too.
      QKV_CUDA_GRAPH=0 build/cuda/tests/cpp/qkv_tests --gtest_filter='ModelDeviceCuda*:ParityModelsCuda*' >"$out/cuda_tests_no_graph.log" 2>&1 ||
        { echo "model tests failed with QKV_CUDA_GRAPH=0 (see cuda_tests_no_graph.log)"; status=1; }
      build/cuda/tests/cpp/qkv_tests --gtest_brief=1 >"$out/all_tests.log" 2>&1 || { echo "full suite failed (all_tests.log)"; status=1; }
      tail -3 "$out/all_tests.log"
    fi
    if [[ " $only " == *" sanitize "* ]]; then
      for tool in memcheck racecheck; do
        compute-sanitizer --tool "$tool" --error-exitcode 3 build/cuda/tests/cpp/qkv_tests \
          --gtest_filter='CudaOps.*:CudaFlashAttention.*:ModelDeviceCuda.*:CudaStepGraph.QueuedSteps*:-CudaOps.Gemm*:CudaOps.AnInjected*' >"$out/sanitize_$tool.log" 2>&1 ||
          { echo "compute-sanitizer $tool found errors (sanitize_$tool.log)"; status=1; }
        tail -2 "$out/sanitize_$tool.log"
      done
    fi
    if [[ " $only " == *" ops "* ]]; then
      build/cuda/bench/qkv_cuda_bench 2>&1 | tee "$out/ops.log" | grep -v '^RESULT' || status=1
      # The ops table has the attention A/B (row-wise FP32 kernels vs the flash ones); this is the same A/B over a
      # whole training step: the char GPT with QKV_CUDA_ATTENTION=rowwise.
      if [ -x build/cuda/bench/qkv_cuda_train ]; then
        echo "== char GPT fp32 training step with the row-wise attention (QKV_CUDA_ATTENTION=rowwise), for the A/B"
        QKV_CUDA_ATTENTION=rowwise build/cuda/bench/qkv_cuda_train char-gpt --device cuda --precision fp32 \
          --steps "$steps" --warmup "$warmup" 2>&1 | tee "$out/train_rowwise.log" | tail -3 || status=1
        echo "== the same step with the Linear biases as a separate pass (QKV_CUDA_LT=0), for the cuBLASLt epilogue's A/B"
        QKV_CUDA_LT=0 build/cuda/bench/qkv_cuda_train char-gpt --device cuda --precision fp32 \
          --steps "$steps" --warmup "$warmup" 2>&1 | tee "$out/train_no_lt.log" | tail -3 || status=1
        echo "== a Seq2Seq fp32 step (ReLU: bias and activation in the epilogue) with QKV_CUDA_LT=0, for the same A/B"
        QKV_CUDA_LT=0 build/cuda/bench/qkv_cuda_train seq2seq --device cuda --precision fp32 \
          --steps "$steps" --warmup "$warmup" 2>&1 | tee "$out/train_s2s_no_lt.log" | tail -3 || status=1
        echo "== the same step launched op by op (QKV_CUDA_GRAPH=0), for the A/B of the step as one CUDA graph"
        QKV_CUDA_GRAPH=0 build/cuda/bench/qkv_cuda_train char-gpt --device cuda --precision fp32 \
          --steps "$steps" --warmup "$warmup" 2>&1 | tee "$out/train_no_graph.log" | tail -3 || status=1
      fi
    fi
    if [[ " $only " == *" ncu "* ]]; then
      # A profiler that is missing or refused (ERR_NVGPUCTRPERM without admin rights) is reported, not a failure.
      if command -v ncu >/dev/null; then
        if ncu --csv --page raw --print-units base --clock-control none --metrics "$(python3 bench/cuda_ncu.py --metrics)" \
          build/cuda/bench/qkv_cuda_bench --reps 1 >"$out/ncu.csv" 2>"$out/ncu.log"; then
          python3 bench/cuda_ncu.py "$out/ncu.csv" | tee "$out/ncu_summary.txt"
        else
          echo "ncu failed (ncu.log): $(grep -m3 -E 'ERR|rror' "$out/ncu.log" "$out/ncu.csv")"
        fi
      else
        echo "ncu: Nsight Compute is not installed on this machine; the ncu stage is skipped"
      fi
    fi
  else
    echo "configure/build failed: see $out/configure.log and $out/build.log"; tail -30 "$out/build.log" "$out/configure.log"
    status=1
  fi
fi

# Training: qkv then PyTorch for each (model, precision), each in its own process; the report reads both logs.
if [[ " $only " == *" train "* || " $only " == *" torch "* ]]; then
  : >"$out/qkv_train.log"
  : >"$out/torch.log"
  for bench in char-gpt seq2seq; do
    for precision in fp32 tf32 bf16; do
      if [[ " $only " == *" train "* ]]; then
        if [ -x build/cuda/bench/qkv_cuda_train ]; then
          build/cuda/bench/qkv_cuda_train "$bench" --device cuda --precision "$precision" --steps "$steps" \
            --warmup "$warmup" 2>&1 | tee -a "$out/qkv_train.log" | tail -5
          [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "qkv_cuda_train $bench $precision failed (qkv_train.log)"; status=1; }
        else
          echo "qkv side: build/cuda/bench/qkv_cuda_train was not built (see the build step above)" | tee -a "$out/qkv_train.log"
          status=1
        fi
      fi
      if [[ " $only " == *" torch "* ]]; then
        for mode in eager compile; do
          python3 bench/cuda_torch.py "$bench" --precision "$precision" --mode "$mode" --steps "$steps" \
            --warmup "$warmup" 2>&1 | tee -a "$out/torch.log" | tail -3
          [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
        done
      fi
    done
  done
  python3 bench/cuda_report.py "$out" || status=1
fi
grep -h "^RESULT" "$out"/*.log 2>/dev/null
exit $status
