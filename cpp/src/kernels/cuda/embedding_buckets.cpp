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

size_t TokenBuckets::used() const { return packed.empty() ? 0 : 2 * static_cast<size_t>(count) + 1 + rows; }

TokenBuckets bucket_tokens(std::span<const int32_t> tokens, int V) {
  TokenBuckets b;
  bucket_tokens(tokens, V, b);
  return b;
}

void bucket_tokens(std::span<const int32_t> tokens, int V, TokenBuckets& b) {
  check(V > 0, "embedding_backward (cuda): V = ", V, ": expected > 0");
  check_ids(tokens, V, std::nullopt, "embedding_backward (cuda)", "tokens");
  const size_t n = tokens.size();
  if (b.counts.size() < static_cast<size_t>(V)) b.counts.resize(static_cast<size_t>(V));
  std::fill_n(b.counts.begin(), V, 0);
  int32_t* counts = b.counts.data();
  for (int32_t t : tokens) ++counts[t];
  b.count = 0;
  for (int v = 0; v < V; ++v) b.count += counts[v] > 0;
  const size_t count = static_cast<size_t>(b.count);
  b.rows = n;
  // Sized for the worst case of (V, n), not this call's count: a later batch of the same shape never grows it.
  const size_t bound = token_buckets_size(V, static_cast<int>(n));
  if (b.packed.size() < bound) b.packed.resize(bound);
  int32_t* token = b.packed.data();
  int32_t* start = token + count;
  int32_t* row = start + count + 1;
  // Bucket k's first row goes at start[k]; counts[v] becomes where token v's next row goes.
  int32_t k = 0, at = 0;
  for (int v = 0; v < V; ++v) {
    if (counts[v] == 0) continue;
    token[k] = v;
    start[k] = at;
    const int32_t c = counts[v];
    counts[v] = at;
    at += c;
    ++k;
  }
  start[count] = at;
  for (size_t r = 0; r < n; ++r) row[counts[tokens[r]]++] = static_cast<int32_t>(r);
}

}  // namespace qkv::kernels::cuda
