#pragma once
// CUDA kernels on the CPU, for the machines without a GPU that build and test qkv: the built-ins the kernels in
// cpp/src/kernels/cuda use (threadIdx, blockIdx, blockDim, __syncthreads, __syncwarp, __shfl_xor_sync,
// __uint_as_float, float2, float4, uint4, dynamic shared memory) and the two PTX instructions of the tensor-core
// attention (cvt.rna.tf32.f32 and mma.sync.m16n8k8 TF32), with a scheduler that runs a launch's blocks one after the
// other and each block's threads as fibers (ucontext) on the calling thread.
//
// A kernel header is included after `#define QKV_WARP_EMULATION 1` (common.cuh then includes this file instead of
// cuda_runtime.h), and launched with emu::launch(grid, threads, shared_bytes, [&] { kernel<...>(args); }).
//
// What it checks, and what it cannot:
//   - Every index, mask, tile bound, fragment layout and reduction of the kernel runs as written, on fp32 values:
//     results are compared with the reference executor as the GPU tests do.
//   - Barriers are real: a thread runs until it reaches __syncthreads (or a warp-wide operation), then the others
//     run; so a value read from shared memory before the barrier that publishes it is the old value, as on a GPU
//     in the worst case. Shared memory starts as NaN (a read of what no thread wrote shows up).
//   - A warp-wide operation that some lanes of a warp do not reach, or a __syncthreads that part of the block
//     skips, deadlocks on a GPU; here it is reported (emu::Deadlock) instead of hanging.
//   - Not modelled: the order of fp32 accumulation inside an mma (summed here in double, then rounded to nearest,
//     or toward zero: set_mma_rounding), memory
//     coalescing, bank conflicts, timing; races between threads of the same barrier interval are not detected
//     (compute-sanitizer's racecheck, on a GPU, is the tool for them).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Static storage is one per kernel function: blocks run one at a time, their threads share it, as a block does.
#define __shared__ static

struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

namespace qkv::emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// A warp-wide operation or barrier that cannot complete: some threads wait for others that will never come.
struct Deadlock : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The calling fiber's thread index, the block's index and size (what threadIdx, blockIdx and blockDim read).
const Dim3& thread_idx();
const Dim3& block_idx();
const Dim3& block_dim();
const Dim3& grid_dim();
// The block's dynamic shared memory (the launch's shared_bytes), 16-byte aligned, NaN at the start of each block.
void* dynamic_shared_bytes();

// Barriers: the block's, and the calling thread's warp's (every live lane must arrive).
void sync_block();
void sync_warp();
// A warp exchange slot: the calling lane's 8 bytes at `round`, then (after sync_warp) any lane's. Rounds alternate
// between two buffers, so one barrier per exchange is enough.
uint64_t* warp_slots(int round);
int next_round();

// Runs kernel() for every thread of every block of the grid (blocks in x, then y, then z order).
void launch(Dim3 grid, unsigned threads, size_t shared_bytes, const std::function<void()>& kernel);

// How an mma rounds its fp32 result: to nearest (the default: the exact sum, rounded once), or toward zero, the
// tensor cores' truncation as measured (Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021), a bias that
// grows with the number of mma summed into one accumulator. Returns the previous setting.
enum class MmaRounding { Nearest, TowardZero };
MmaRounding set_mma_rounding(MmaRounding r);

}  // namespace qkv::emu

#define threadIdx (::qkv::emu::thread_idx())
#define blockIdx (::qkv::emu::block_idx())
#define blockDim (::qkv::emu::block_dim())
#define gridDim (::qkv::emu::grid_dim())

inline void __syncthreads() { ::qkv::emu::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::qkv::emu::sync_warp(); }

// Every lane publishes v, then reads lane (lane ^ mask)'s; all 32 lanes of the warp must take part.
template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffle moves at most 8 bytes here");
  const int round = ::qkv::emu::next_round();
  uint64_t* slots = ::qkv::emu::warp_slots(round);
  const int lane = static_cast<int>(threadIdx.x % 32);
  std::memcpy(&slots[lane], &v, sizeof(T));
  ::qkv::emu::sync_warp();
  T r;
  std::memcpy(&r, &slots[lane ^ lane_mask], sizeof(T));
  return r;
}

inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// __fadd_rn, __fmul_rn: one rounding each, never contracted into a fused multiply-add with a neighbour (nvcc
// promises that for these; here they are defined in warp_emulation.cpp, out of the compiler's reach).
float __fadd_rn(float a, float b);
float __fmul_rn(float a, float b);
double __dadd_rn(double a, double b);
double __dmul_rn(double a, double b);
using std::isfinite;
using std::max;
using std::min;

namespace qkv::kernels::cuda {

template <class T>
inline T* dynamic_shared() {
  return static_cast<T*>(::qkv::emu::dynamic_shared_bytes());
}

// cvt.rna.tf32.f32: x rounded to 10 explicit mantissa bits, to nearest with ties away from zero (adding half of
// the last kept bit to the magnitude, then truncating), the low 13 bits zero; infinities and NaN unchanged.
inline uint32_t to_tf32(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;
  return (u + 0x1000u) & 0xffffe000u;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, c += a b over the warp (PTX ISA fragment layouts, g = lane
// / 4, t = lane % 4): A (16x8) a0 (g, t) a1 (g+8, t) a2 (g, t+4) a3 (g+8, t+4); B (8x8) b0 (t, g) b1 (t+4, g);
// C (16x8) c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1). Products of TF32 values are exact in fp32; the sum
// is taken in double and rounded once (the hardware's order is unspecified).
void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

// cvt.rn.bf16x2.f32 with the operands in fragment order: lo's bf16 (round to nearest even) in the low half, hi's in
// the high half; NaN stays NaN.
uint32_t pack_bf16(float lo, float hi);
// The bf16 value of a half of a packed register, as a float (exact).
float bf16_half(uint32_t packed, int high);

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA layouts, g = lane / 4, t = lane % 4; each register
// two bf16, the lower index in the low half): A (16x16) a0 (g, 2t..2t+1) a1 (g+8, 2t..2t+1) a2 (g, 2t+8..2t+9)
// a3 (g+8, 2t+8..2t+9); B (16x8) b0 (2t..2t+1, g) b1 (2t+8..2t+9, g); C as mma_tf32's. Products of bf16 values are
// exact in fp32; the sum is taken in double and rounded once.
void mma_bf16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

}  // namespace qkv::kernels::cuda
