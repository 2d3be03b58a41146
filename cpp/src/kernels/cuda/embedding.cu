// The host side of the embedding (embedding.cuh has the kernels and the scheme): the launches, the checks, and
// the stable sort of the rows by token (cub::DeviceRadixSort, LSD radix and so stable: equal tokens keep their
// rows in increasing order) over the bits that ids below V can have.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/embedding.cuh"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

constexpr size_t kAlign = 256;  // every piece of the scratch starts at a multiple (cub's temporary storage wants it)

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Bits of the largest id, V - 1 (at least 1): the sort passes over these only.
int id_bits(int V) {
  int bits = 1;
  while (bits < 31 && (1 << bits) < V) ++bits;
  return bits;
}

void check_sizes(const char* op, int B, int T, int C) {
  check(B >= 0 && T >= 0, op, " (cuda): B = ", B, ", T = ", T, ": expected >= 0");
  check(C > 0, op, " (cuda): C = ", C, ": expected > 0");
}

// cub's temporary storage for sorting n (token, row) pairs; asks cub, which launches nothing for it.
size_t sort_bytes(int V, int n, const char* op) {
  size_t bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), n, 0, id_bits(V), stream()),
             op, "cub::DeviceRadixSort::SortPairs (sizing)");
  return bytes;
}

// The scratch, in order: sorted tokens, row indices, sorted rows (n each), begin and end (V each), cub's storage.
struct Pieces {
  uint32_t* sorted_tokens;
  int32_t *rows, *sorted_rows, *begin, *end;
  void* sort;
  size_t sort_bytes;
};

size_t fixed_bytes(int V, int n) {
  return 3 * aligned(sizeof(int32_t) * static_cast<size_t>(n)) + 2 * aligned(sizeof(int32_t) * static_cast<size_t>(V));
}

Pieces pieces(void* scratch, int V, int n, size_t sort) {
  char* p = static_cast<char*>(scratch);
  const auto take = [&](size_t bytes) {
    void* at = p;
    p += aligned(bytes);
    return at;
  };
  Pieces s{};
  s.sorted_tokens = static_cast<uint32_t*>(take(sizeof(int32_t) * static_cast<size_t>(n)));
  s.rows = static_cast<int32_t*>(take(sizeof(int32_t) * static_cast<size_t>(n)));
  s.sorted_rows = static_cast<int32_t*>(take(sizeof(int32_t) * static_cast<size_t>(n)));
  s.begin = static_cast<int32_t*>(take(sizeof(int32_t) * static_cast<size_t>(V)));
  s.end = static_cast<int32_t*>(take(sizeof(int32_t) * static_cast<size_t>(V)));
  s.sort = take(sort);
  s.sort_bytes = sort;
  return s;
}

}  // namespace

void embedding_forward(float* x, const int32_t* tokens, const float* wte, const float* pos, float scale, int B, int T,
                       int C) {
  const char* op = "embedding_forward";
  check_sizes(op, B, T, C);
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  check(x && tokens && wte && pos, op, " (cuda): null device pointer");
  embedding_forward_kernel<<<grid_for(n, kEmbeddingThreads), kEmbeddingThreads, 0, stream()>>>(x, tokens, wte, pos,
                                                                                               scale, T, C, n);
  check_launch(op);
}

size_t embedding_backward_scratch_bytes(int V, int rows) {
  const char* op = "embedding_backward";
  check(V > 0 && rows >= 0, op, " (cuda): V = ", V, ", rows = ", rows, ": expected V > 0, rows >= 0");
  if (rows == 0) return 0;
  return fixed_bytes(V, rows) + aligned(sort_bytes(V, rows, op)) + kAlign;  // + kAlign: an unaligned scratch start
}

void embedding_backward(float* dwte, float* dpos, const float* dx, const int32_t* tokens, int V, float scale, int B,
                        int T, int C, void* scratch, size_t scratch_bytes) {
  const char* op = "embedding_backward";
  check_sizes(op, B, T, C);
  check(V > 0, op, " (cuda): V = ", V, ": expected > 0");
  const int n = B * T;
  if (n == 0) return;
  check(dwte && dx && tokens && scratch, op, " (cuda): null device pointer");
  const size_t sort = sort_bytes(V, n, op);
  // The pieces start at the first kAlign boundary of the scratch.
  const uintptr_t at = reinterpret_cast<uintptr_t>(scratch), start = (at + kAlign - 1) / kAlign * kAlign;
  check(start - at + fixed_bytes(V, n) + sort <= scratch_bytes, op, " (cuda): scratch of ", scratch_bytes,
        " bytes: expected embedding_backward_scratch_bytes(", V, ", ", n, ")");
  const Pieces s = pieces(reinterpret_cast<void*>(start), V, n, sort);

  const unsigned blocks = static_cast<unsigned>((n + kEmbeddingThreads - 1) / kEmbeddingThreads);
  row_index_kernel<<<blocks, kEmbeddingThreads, 0, stream()>>>(s.rows, n);
  check_launch(op);
  size_t sort_storage = s.sort_bytes;
  check_cuda(cub::DeviceRadixSort::SortPairs(s.sort, sort_storage, reinterpret_cast<const uint32_t*>(tokens),
                                             s.sorted_tokens, s.rows, s.sorted_rows, n, 0, id_bits(V), stream()),
             op, "cub::DeviceRadixSort::SortPairs");
  check_cuda(cudaMemsetAsync(s.begin, 0, 2 * aligned(sizeof(int32_t) * static_cast<size_t>(V)), stream()), op,
             "cudaMemsetAsync");
  token_ranges_kernel<<<blocks, kEmbeddingThreads, 0, stream()>>>(s.begin, s.end,
                                                                  reinterpret_cast<const int32_t*>(s.sorted_tokens), n);
  check_launch(op);
  embedding_wte_kernel<<<dim3(static_cast<unsigned>(V), (C + kEmbeddingThreads - 1) / kEmbeddingThreads),
                         kEmbeddingThreads, 0, stream()>>>(dwte, dx, s.begin, s.end, s.sorted_rows, scale, C);
  check_launch(op);
  if (dpos) {
    const size_t m = static_cast<size_t>(T) * C;
    embedding_pos_kernel<<<static_cast<unsigned>((m + kEmbeddingThreads - 1) / kEmbeddingThreads), kEmbeddingThreads, 0,
                           stream()>>>(dpos, dx, B, T, C);
    check_launch(op);
  }
}

}  // namespace qkv::kernels::cuda
