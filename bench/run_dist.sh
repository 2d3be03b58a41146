#!/usr/bin/env bash
# Data-parallel training, 1 vs 2 ranks of one thread each on this machine (issue 23; bench/README.md,
# "Data parallel over MPI"): the char GPT and the Seq2Seq, tokens/s, communication per step and its overlap.
#
#   bench/run_dist.sh                         # both models, 1 and 2 ranks
#   DIST_MODELS="char-gpt" DIST_STEPS=10 bench/run_dist.sh
#
# Env: BUILD (build/mpi), DIST_MODELS ("char-gpt seq2seq"), DIST_STEPS (20), DIST_RANKS ("1 2"), DIST_ROUNDS (3:
# the machine is shared, so each configuration runs that many times, alternating; read the best), DIST_SKIP_BUILD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/mpi}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
if [[ "${DIST_SKIP_BUILD:-0}" != 1 ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DQKV_CUDA=OFF > /dev/null
  cmake --build "$BUILD" --target qkv_dist_bench -j2 > /dev/null
fi
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
for model in ${DIST_MODELS:-char-gpt seq2seq}; do
  for round in $(seq 1 "${DIST_ROUNDS:-3}"); do
    for np in ${DIST_RANKS:-1 2}; do
      timeout 900 mpirun -np "$np" --bind-to core "$BUILD/bench/qkv_dist_bench" --model "$model" \
        --steps "${DIST_STEPS:-20}" | grep '^RESULT' | sed "s/^RESULT /RESULT round=$round /"
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
