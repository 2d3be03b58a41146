// The host half of the embedding backward (cuda_kernels.h: bucket_tokens): a stable counting sort of the
// (B*T) rows by token id, so that the device adds each token's rows in increasing order with one thread per
// (token, column): no atomics, the CPU's order, the same dwte bits on every run.
//   packed = [token (count) | start (count + 1) | row (n)]: bucket k is token[k], whose rows are
//   row[start[k] .. start[k+1]), increasing.
#include <algorithm>

#include "kernels/cuda/cuda_kernels.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {

size_t token_buckets_size(int V, int rows) {
  const size_t distinct = static_cast<size_t>(std::max(0, std::min(V, rows)));
  return 2 * distinct + 1 + static_cast<size_t>(std::max(0, rows));
}

TokenBuckets bucket_tokens(std::span<const int32_t> tokens, int V) {
  check(V > 0, "embedding_backward (cuda): V = ", V, ": expected > 0");
  check_ids(tokens, V, std::nullopt, "embedding_backward (cuda)", "tokens");
  std::vector<int32_t> counts(static_cast<size_t>(V), 0);
  for (int32_t t : tokens) ++counts[static_cast<size_t>(t)];
  TokenBuckets b;
  for (int v = 0; v < V; ++v) b.count += counts[static_cast<size_t>(v)] > 0;
  const size_t n = tokens.size(), count = static_cast<size_t>(b.count);
  b.packed.resize(2 * count + 1 + n);
  int32_t* token = b.packed.data();
  int32_t* start = token + count;
  int32_t* row = start + count + 1;
  // Bucket k's first row goes at start[k]; next[v] is where token v's next row goes.
  std::vector<int32_t> next(static_cast<size_t>(V), 0);
  int32_t k = 0, at = 0;
  for (int v = 0; v < V; ++v) {
    if (counts[static_cast<size_t>(v)] == 0) continue;
    token[k] = v;
    start[k] = at;
    next[static_cast<size_t>(v)] = at;
    at += counts[static_cast<size_t>(v)];
    ++k;
  }
  start[count] = at;
  for (size_t r = 0; r < n; ++r) row[next[static_cast<size_t>(tokens[r])]++] = static_cast<int32_t>(r);
  return b;
}

}  // namespace qkv::kernels::cuda
