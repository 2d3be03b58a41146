// Attention forward and backward on tensor cores in FlashAttention-2's scheme (kernels.h: attention_*; the
// row-wise FP32 kernels of attention.cu are the GPU reference these are tested and benchmarked against).
// reference: https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html
//            FlashAttention-2 (Dao, 2023), algorithms 1 and 2.
// Legend: b batch, h head, t query, s key, d a column of the head (hs = C/H of them, zero-padded to D, a multiple
// of 32: 32, 64, 96 or 128), g = lane / 4 and c = lane % 4 (an mma fragment's row group and column pair).
//
// Tiles. A block is 4 warps; it owns kOwn = 64 rows of one side (queries for the forward and dq, keys for dk/dv),
// 16 per warp, and walks the other side in tiles staged through shared memory (rows of D floats plus a skew of
// 4, so that the fragment reads below hit 32 different banks). Products are warp-level mma.sync.m16n8k8 on TF32
// inputs with fp32 accumulation: a warp computes its 16 rows against a whole tile.
//   forward   (64 queries, key tiles of 64):  S = Q K^T;  online softmax;  O += dropout(P) V
//   dq        (64 queries, key tiles of 32):  S = Q K^T, dP = dO V^T;  dS = P * (dP' - D);  dQ += dS K
//   dk, dv    (64 keys, query tiles of 32):   S^T = K Q^T, dP^T = V dO^T;  dV += dropout(P)^T dO;  dK += dS^T Q
// with P = exp(S / sqrt(hs) - lse) recomputed from the forward's lse, dP' = dropout_backward(dP), and
// D_t = rowsum(dO_t * O_t), which the dq kernel computes for its rows and leaves in scratch for the dk/dv kernel
// (launched after it). dq and dk/dv are two kernels so that every output has one writer: no atomics, results that
// do not depend on scheduling (the price: S and dP are computed twice, 7 tile products instead of FA2's 5).
// Under the causal mask a block skips the key tiles wholly past its last query (and a warp the tiles wholly past
// its own), so about half the work of a square causal problem is never done.
//
// Precision. Fp32 (the default, set_cuda_tf32(false)) keeps fp32 accuracy with 3xTF32: each operand x is split
// into big = tf32(x) and small = tf32(x - big), and a*b ~ a_small*b_big + a_big*b_small + a_big*b_big (the dropped
// a_small*b_small and the rounding of the smalls are ~2^-22 of |a||b|, fp32's own order), three mma for each
// product. Tf32 uses the big parts alone (one mma; 10-bit mantissas, ~2^-11 per input): kAttentionTf32Tolerance.
// Bf16 (set_cuda_precision(BF16)) rounds both operands of every product to bf16 and runs mma.m16n8k16 (k in steps of
// 16; 8 significant bits, ~2^-8 per input): kAttentionBf16Tolerance. Softmax, lse, D and the accumulators stay fp32.
//
// Fragments (PTX ISA, "Matrix fragments for mma.m16n8k8" with .tf32; (row, column) of the 16x8 A, 8x8 B and 16x8
// C tiles):  A: a0 (g, c), a1 (g+8, c), a2 (g, c+4), a3 (g+8, c+4);  B: b0 (c, g), b1 (c+4, g);
//            C: c0 (g, 2c), c1 (g, 2c+1), c2 (g+8, 2c), c3 (g+8, 2c+1).
// m16n8k16 with .bf16 (each register two bf16, the lower k in the low half): A: a0 (g, 2c..2c+1),
// a1 (g+8, 2c..2c+1), a2 (g, 2c+8..2c+9), a3 (g+8, 2c+8..2c+9);  B: b0 (2c..2c+1, g), b1 (2c+8..2c+9, g);  C as above.
// A product whose A operand is an earlier product's result (P V, dS K, ...) takes it straight from the
// accumulator registers, with no shuffle: the mma sums over k in any order, so within each block of 8 the k index
// is relabelled (A column c is P column 2c, A column c+4 is P column 2c+1: exactly c0/c2 and c1/c3) and B's rows
// are read in the same relabelled order (mma_pb).
//
// This header holds the kernels (device code only) so that tests/cpp/emulation can run them on the CPU as well
// (QKV_WARP_EMULATION: common.cuh's built-ins become the emulator's); flash_attention.cu launches them.
#pragma once
#include <cstdint>

#include "kernels/cuda/attention_common.cuh"

namespace qkv::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kWarpRows = 16;             // an mma's M: the rows a warp owns
constexpr int kOwn = kWarps * kWarpRows;  // rows a block owns
constexpr int kForwardKeys = 64;          // forward: keys per tile
constexpr int kDqKeys = 32;               // dq: keys per tile (two more (64, D) tiles than the forward holds)
constexpr int kDkvQueries = 32;           // dk/dv: queries per tile
constexpr int kSkew = 4;                  // row stride D + 4 = 4 (mod 32) banks: fragment reads conflict-free
constexpr float kInf = __builtin_huge_valf();

__host__ __device__ constexpr int stride_of(int D) { return D + kSkew; }
constexpr size_t forward_smem(int D) {
  return sizeof(float) * static_cast<size_t>(kOwn + 2 * kForwardKeys) * stride_of(D) + sizeof(int) * kForwardKeys;
}
constexpr size_t dq_smem(int D) {
  return sizeof(float) * (static_cast<size_t>(2 * kOwn + 2 * kDqKeys) * stride_of(D) + kOwn) + sizeof(int) * kDqKeys;
}
constexpr size_t dkv_smem(int D) {
  return sizeof(float) * (static_cast<size_t>(2 * kOwn + 2 * kDkvQueries) * stride_of(D) + 2 * kDkvQueries);
}
static_assert(dq_smem(kAttentionMaxHeadSize) <= 227 * 1024, "shared memory past sm_90's 227 KiB per block");

// ---- Operands and the mma: TF32 (m16n8k8) and bf16 (m16n8k16) ----

#ifndef QKV_WARP_EMULATION  // the emulator has its own (tests/cpp/emulation/warp_emulation.h)
__device__ inline uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// c (16x8) += a (16x8) b (8x8), TF32 inputs, fp32 accumulation.
__device__ inline void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two values as bf16 (round to nearest even) in one register: lo in the low half (the lower k index, as the
// m16n8k16 fragments want it). cvt's first source goes to the high half.
__device__ inline uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// c (16x8) += a (16x16) b (16x8), bf16 inputs, fp32 accumulation.
__device__ inline void mma_bf16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// N values of a fragment as TF32: big[i] = tf32(x_i) and, for 3xTF32 (kSplit), small[i] = tf32(x_i - big[i]).
template <int N, bool kSplit>
struct Operand {
  uint32_t big[N];
  uint32_t small[kSplit ? N : 1];
  __device__ void set(int i, float x) {
    big[i] = to_tf32(x);
    if constexpr (kSplit) small[i] = to_tf32(x - __uint_as_float(big[i]));
  }
};

// c += a b: 3xTF32 with the two small cross terms first (each ~2^-11 of the big one), or 1xTF32.
template <bool kSplit>
__device__ inline void mma(float (&c)[4], const Operand<4, kSplit>& a, const Operand<2, kSplit>& b) {
  if constexpr (kSplit) {
    mma_tf32(c, a.small, b.big);
    mma_tf32(c, a.big, b.small);
  }
  mma_tf32(c, a.big, b.big);
}

// One warp: acc (16 x 8NB) += A (16 x 8KB) B (8KB x 8NB), with A(m, k) and B(k, n) read through the accessors
// (shared memory). The fragment layouts are the file comment's; bf16 takes k in steps of 16 (KB even).
template <int KB, int NB, AttentionPrecision kP, class AAt, class BAt>
__device__ inline void mma_ab(float (&acc)[NB][4], AAt a_at, BAt b_at) {
  const int lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
  if constexpr (kP == AttentionPrecision::Bf16) {
    static_assert(KB % 2 == 0, "bf16 products take k in steps of 16");
#pragma unroll
    for (int kb = 0; kb < KB; kb += 2) {
      const int k = kb * 8 + 2 * c;
      const uint32_t a[4] = {pack_bf16(a_at(g, k), a_at(g, k + 1)), pack_bf16(a_at(g + 8, k), a_at(g + 8, k + 1)),
                             pack_bf16(a_at(g, k + 8), a_at(g, k + 9)),
                             pack_bf16(a_at(g + 8, k + 8), a_at(g + 8, k + 9))};
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        const int n = nb * 8 + g;
        const uint32_t b[2] = {pack_bf16(b_at(k, n), b_at(k + 1, n)), pack_bf16(b_at(k + 8, n), b_at(k + 9, n))};
        mma_bf16(acc[nb], a, b);
      }
    }
  } else {
    constexpr bool kSplit = kP == AttentionPrecision::Fp32;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      const int k = kb * 8 + c;
      Operand<4, kSplit> a;
      a.set(0, a_at(g, k));
      a.set(1, a_at(g + 8, k));
      a.set(2, a_at(g, k + 4));
      a.set(3, a_at(g + 8, k + 4));
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        Operand<2, kSplit> b;
        b.set(0, b_at(k, nb * 8 + g));
        b.set(1, b_at(k + 4, nb * 8 + g));
        mma<kSplit>(acc[nb], a, b);
      }
    }
  }
}

// One warp: acc (16 x 8NB) += P (16 x 8KB) B (8KB x 8NB), with P in registers as the C fragments of an earlier
// product (p[kb] = columns 8kb .. 8kb+7).
//   TF32: the k index relabelled within each block of 8 (file comment): a = (p0, p2, p1, p3),
//         b0 = B(8kb + 2c, n), b1 = B(8kb + 2c + 1, n).
//   bf16: two C fragments make one A fragment of 16 columns as they are (a0 = columns 2c, 2c+1 of row g is
//         p[kb][0..1], a1 row g+8 p[kb][2..3], a2 and a3 the same of p[kb+1]); b0 = B(16k' + 2c .. +1, n),
//         b1 = B(16k' + 2c + 8 .. +9, n).
template <int KB, int NB, AttentionPrecision kP, class BAt>
__device__ inline void mma_pb(float (&acc)[NB][4], const float (&p)[KB][4], BAt b_at) {
  const int lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
  if constexpr (kP == AttentionPrecision::Bf16) {
    static_assert(KB % 2 == 0, "bf16 products take k in steps of 16");
#pragma unroll
    for (int kb = 0; kb < KB; kb += 2) {
      const uint32_t a[4] = {pack_bf16(p[kb][0], p[kb][1]), pack_bf16(p[kb][2], p[kb][3]),
                             pack_bf16(p[kb + 1][0], p[kb + 1][1]), pack_bf16(p[kb + 1][2], p[kb + 1][3])};
      const int k = kb * 8 + 2 * c;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        const int n = nb * 8 + g;
        const uint32_t b[2] = {pack_bf16(b_at(k, n), b_at(k + 1, n)), pack_bf16(b_at(k + 8, n), b_at(k + 9, n))};
        mma_bf16(acc[nb], a, b);
      }
    }
  } else {
    constexpr bool kSplit = kP == AttentionPrecision::Fp32;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      Operand<4, kSplit> a;
      a.set(0, p[kb][0]);
      a.set(1, p[kb][2]);
      a.set(2, p[kb][1]);
      a.set(3, p[kb][3]);
      const int k = kb * 8 + 2 * c;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        Operand<2, kSplit> b;
        b.set(0, b_at(k, nb * 8 + g));
        b.set(1, b_at(k + 1, nb * 8 + g));
        mma<kSplit>(acc[nb], a, b);
      }
    }
  }
}

// Element i of a C fragment: its row within the warp's 16 (g or g + 8) and its column within the 8.
__device__ inline int frag_row(int i) { return threadIdx.x % kWarp / 4 + (i >> 1) * 8; }
__device__ inline int frag_col(int i) { return threadIdx.x % 4 * 2 + (i & 1); }

// Max and sum over the 4 lanes of a quad (the lanes holding one row of a C fragment).
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 1));
  return fmaxf(x, __shfl_xor_sync(kFullMask, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(kFullMask, x, 1);
  return x + __shfl_xor_sync(kFullMask, x, 2);
}

// Rows [r0, r0 + R) of one head's slice (src: row 0, column 0 of the head; row stride ld) into dst (R, D + kSkew):
// zeros past `limit` rows and past hs columns, so that padding adds nothing to a product. vec: float4 loads (the
// host checked 16-byte alignment of every row start and hs % 4 == 0). All threads of the block take part.
template <int R, int D>
__device__ inline void load_rows(float* dst, const float* src, size_t ld, int r0, int limit, int hs, bool vec) {
  constexpr int S = stride_of(D);
  if (vec) {
    constexpr int D4 = D / 4;
    for (int e = threadIdx.x; e < R * D4; e += kThreads) {
      const int r = e / D4, d = e % D4 * 4;
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r0 + r < limit && d < hs) x = *reinterpret_cast<const float4*>(src + static_cast<size_t>(r0 + r) * ld + d);
      *reinterpret_cast<float4*>(dst + r * S + d) = x;
    }
  } else {
    for (int e = threadIdx.x; e < R * D; e += kThreads) {
      const int r = e / D, d = e % D;
      dst[r * S + d] = r0 + r < limit && d < hs ? src[static_cast<size_t>(r0 + r) * ld + d] : 0.f;
    }
  }
}

struct FlashParams {
  AttentionParams a;
  bool vec;  // every row start of q, k, v, out, dout 16-byte aligned and hs % 4 == 0
};

// ---- forward ----

// grid (ceil(Tq / 64), H, B). out (B,Tq,C) and lse (B,H,Tq), as attention.cu's forward.
template <int D, AttentionPrecision kP>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, FlashParams fp) {
  constexpr int S = stride_of(D), KB = D / 8, NK = kForwardKeys / 8;
  const AttentionParams& p = fp.a;
  const uint64_t seed = seed_of(p);
  float* Qs = dynamic_shared<float>();                          // (kOwn, S)
  float* Ks = Qs + kOwn * S;                                    // (kForwardKeys, S)
  float* Vs = Ks + kForwardKeys * S;                            // (kForwardKeys, S)
  int* key_ok = reinterpret_cast<int*>(Vs + kForwardKeys * S);  // (kForwardKeys): present and not padding
  const int warp = threadIdx.x / kWarp, b = blockIdx.z, h = blockIdx.y, hs = p.hs;
  const int q0 = blockIdx.x * kOwn, w0 = q0 + warp * kWarpRows;  // the block's and the warp's first query
  const size_t kv0 = static_cast<size_t>(b) * p.key_rows * p.ldkv + h * hs;
  load_rows<kOwn, D>(Qs, q + static_cast<size_t>(b) * p.Tq * p.ldq + h * hs, p.ldq, q0, p.Tq, hs, fp.vec);
  const int w_last = min(w0 + kWarpRows, p.Tq) - 1;  // the warp's last query (< w0 when it has none)
  const int s_end = p.causal ? min(p.Tk, min(q0 + kOwn, p.Tq) + p.q_pos) : p.Tk;

  float o[KB][4] = {};                             // the unnormalised output, C fragments over d
  float m[2] = {-kInf, -kInf}, l[2] = {0.f, 0.f};  // rows g, g + 8: running max, this lane's part of the sum
  const float* Qw = Qs + warp * kWarpRows * S;
  for (int s0 = 0; s0 < s_end; s0 += kForwardKeys) {
    __syncthreads();  // the previous tile is used up (and Qs written, the first time)
    load_rows<kForwardKeys, D>(Ks, k + kv0, p.ldkv, s0, p.Tk, hs, fp.vec);
    load_rows<kForwardKeys, D>(Vs, v + kv0, p.ldkv, s0, p.Tk, hs, fp.vec);
    if (threadIdx.x < kForwardKeys) key_ok[threadIdx.x] = key_present(p, b, s0 + threadIdx.x);
    __syncthreads();
    // Warp-uniform: no queries here, or every key of the tile after the warp's last query.
    if (w_last < w0 || (p.causal && s0 > w_last + p.q_pos)) continue;

    float sc[NK][4] = {};  // S = Q K^T: A(m, d) = Q[m][d], B(d, j) = K[j][d]
    mma_ab<KB, NK, kP>(
        sc, [&](int r, int d) { return Qw[r * S + d]; }, [&](int d, int j) { return Ks[j * S + d]; });
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nb = 0; nb < NK; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int t = w0 + frag_row(i), j = nb * 8 + frag_col(i);
        const bool vis = key_ok[j] && !(p.causal && s0 + j > t + p.q_pos);
        sc[nb][i] = vis ? sc[nb][i] * p.scale : -kInf;
        mx[i >> 1] = fmaxf(mx[i >> 1], sc[nb][i]);
      }
    float base[2];  // the new max, or 0 while a row has seen no key (then every exp below is exp(-inf) = 0)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);
      base[r] = mx[r] == -kInf ? 0.f : mx[r];
      const float alpha = expf(m[r] - base[r]);  // rescales what came before: 0 the first time (m = -inf)
      m[r] = mx[r];
      l[r] *= alpha;
#pragma unroll
      for (int nb = 0; nb < KB; ++nb) o[nb][2 * r] *= alpha, o[nb][2 * r + 1] *= alpha;
    }
#pragma unroll
    for (int nb = 0; nb < NK; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float pj = expf(sc[nb][i] - base[i >> 1]);
        l[i >> 1] += pj;
        const bool keep = kept(p, seed, b, h, w0 + frag_row(i), s0 + nb * 8 + frag_col(i));
        sc[nb][i] = keep ? pj * p.keep_scale : 0.f;  // now dropout(P)
      }
    // O += dropout(P) V: B(j, d) = V[j][d]
    mma_pb<NK, KB, kP>(o, sc, [&](int j, int d) { return Vs[j * S + d]; });
  }
  if (w_last < w0) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = quad_sum(l[r]);
#pragma unroll
  for (int nb = 0; nb < KB; ++nb)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = w0 + frag_row(i), d = nb * 8 + frag_col(i);
      const float inv = l[i >> 1] > 0.f ? 1.f / l[i >> 1] : 0.f;  // every key masked: output 0
      if (t < p.Tq && d < hs) out[(static_cast<size_t>(b) * p.Tq + t) * p.C + h * hs + d] = o[nb][i] * inv;
    }
  if (threadIdx.x % 4 == 0)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int t = w0 + frag_row(2 * r);
      if (t < p.Tq) lse[(static_cast<size_t>(b) * p.H + h) * p.Tq + t] = l[r] > 0.f ? m[r] + logf(l[r]) : kInf;
    }
}

// ---- backward: dq (and D) ----

// grid (ceil(Tq / 64), H, B). Writes D (B,H,Tq) = rowsum(dout * out) into Dg for the dk/dv kernel, and dq.
template <int D, AttentionPrecision kP>
__global__ void __launch_bounds__(kThreads)
    flash_dq_kernel(float* dq, float* Dg, const float* dout, const float* q, const float* k, const float* v,
                    const float* out, const float* lse, FlashParams fp) {
  constexpr int S = stride_of(D), KB = D / 8, NK = kDqKeys / 8;
  const AttentionParams& p = fp.a;
  const uint64_t seed = seed_of(p);
  float* Qs = dynamic_shared<float>();              // (kOwn, S)
  float* dOs = Qs + kOwn * S;                       // (kOwn, S)
  float* Ks = dOs + kOwn * S;                       // (kDqKeys, S)
  float* Vs = Ks + kDqKeys * S;                     // (kDqKeys, S)
  float* Ds = Vs + kDqKeys * S;                     // (kOwn)
  int* key_ok = reinterpret_cast<int*>(Ds + kOwn);  // (kDqKeys)
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, b = blockIdx.z, h = blockIdx.y, hs = p.hs;
  const int q0 = blockIdx.x * kOwn, w0 = q0 + warp * kWarpRows;
  const size_t bh = (static_cast<size_t>(b) * p.H + h) * p.Tq;
  const size_t kv0 = static_cast<size_t>(b) * p.key_rows * p.ldkv + h * hs;
  const size_t o0 = static_cast<size_t>(b) * p.Tq * p.C + h * hs;  // out and dout: row stride C
  load_rows<kOwn, D>(Qs, q + static_cast<size_t>(b) * p.Tq * p.ldq + h * hs, p.ldq, q0, p.Tq, hs, fp.vec);
  load_rows<kOwn, D>(dOs, dout + o0, p.C, q0, p.Tq, hs, fp.vec);
  __syncthreads();
  const int w_last = min(w0 + kWarpRows, p.Tq) - 1;
  // D for the warp's rows: dout from shared memory, out read once from global.
  for (int r = 0; r < kWarpRows && w0 + r <= w_last; ++r) {
    float part = 0.f;
    for (int d = lane; d < hs; d += kWarp)
      part += dOs[(warp * kWarpRows + r) * S + d] * out[o0 + static_cast<size_t>(w0 + r) * p.C + d];
    part = warp_sum(part);
    if (lane == 0) Ds[warp * kWarpRows + r] = part, Dg[bh + w0 + r] = part;
  }
  __syncwarp();
  float Dr[2], lse_r[2];  // rows g, g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = w0 + frag_row(2 * r);
    Dr[r] = t <= w_last ? Ds[warp * kWarpRows + frag_row(2 * r)] : 0.f;
    lse_r[r] = t <= w_last ? lse[bh + t] : kInf;
  }
  const int s_end = p.causal ? min(p.Tk, min(q0 + kOwn, p.Tq) + p.q_pos) : p.Tk;
  const float* Qw = Qs + warp * kWarpRows * S;
  const float* dOw = dOs + warp * kWarpRows * S;
  float acc[KB][4] = {};  // dQ / scale, C fragments over d
  for (int s0 = 0; s0 < s_end; s0 += kDqKeys) {
    __syncthreads();
    load_rows<kDqKeys, D>(Ks, k + kv0, p.ldkv, s0, p.Tk, hs, fp.vec);
    load_rows<kDqKeys, D>(Vs, v + kv0, p.ldkv, s0, p.Tk, hs, fp.vec);
    if (threadIdx.x < kDqKeys) key_ok[threadIdx.x] = key_present(p, b, s0 + threadIdx.x);
    __syncthreads();
    if (w_last < w0 || (p.causal && s0 > w_last + p.q_pos)) continue;
    float sc[NK][4] = {}, dp[NK][4] = {};
    // S = Q K^T and dP = dO V^T: B(d, j) = K[j][d], V[j][d]
    mma_ab<KB, NK, kP>(
        sc, [&](int r, int d) { return Qw[r * S + d]; }, [&](int d, int j) { return Ks[j * S + d]; });
    mma_ab<KB, NK, kP>(
        dp, [&](int r, int d) { return dOw[r * S + d]; }, [&](int d, int j) { return Vs[j * S + d]; });
#pragma unroll
    for (int nb = 0; nb < NK; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int t = w0 + frag_row(i), j = nb * 8 + frag_col(i), s = s0 + j;
        float ds = 0.f;
        if (key_ok[j] && !(p.causal && s > t + p.q_pos)) {
          const float pj = expf(sc[nb][i] * p.scale - lse_r[i >> 1]);
          const float dpj = kept(p, seed, b, h, t, s) ? dp[nb][i] * p.keep_scale : 0.f;
          ds = pj * (dpj - Dr[i >> 1]);
        }
        sc[nb][i] = ds;
      }
    // dQ += dS K: B(j, d) = K[j][d]
    mma_pb<NK, KB, kP>(acc, sc, [&](int j, int d) { return Ks[j * S + d]; });
  }
  if (w_last < w0) return;
#pragma unroll
  for (int nb = 0; nb < KB; ++nb)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = w0 + frag_row(i), d = nb * 8 + frag_col(i);
      if (t < p.Tq && d < hs) dq[(static_cast<size_t>(b) * p.Tq + t) * p.ldq + h * hs + d] = acc[nb][i] * p.scale;
    }
}

// ---- backward: dk, dv ----

// grid (ceil(Tk / 64), H, B); after the dq kernel (it reads D from Dg).
template <int D, AttentionPrecision kP>
__global__ void __launch_bounds__(kThreads)
    flash_dkv_kernel(float* dk, float* dv, const float* Dg, const float* dout, const float* q, const float* k,
                     const float* v, const float* lse, FlashParams fp) {
  constexpr int S = stride_of(D), KB = D / 8, NQ = kDkvQueries / 8;
  const AttentionParams& p = fp.a;
  const uint64_t seed = seed_of(p);
  float* Ks = dynamic_shared<float>();   // (kOwn, S)
  float* Vs = Ks + kOwn * S;             // (kOwn, S)
  float* Qs = Vs + kOwn * S;             // (kDkvQueries, S)
  float* dOs = Qs + kDkvQueries * S;     // (kDkvQueries, S)
  float* lse_s = dOs + kDkvQueries * S;  // (kDkvQueries)
  float* D_s = lse_s + kDkvQueries;      // (kDkvQueries)
  const int warp = threadIdx.x / kWarp, b = blockIdx.z, h = blockIdx.y, hs = p.hs;
  const int k0 = blockIdx.x * kOwn, w0 = k0 + warp * kWarpRows;  // the block's and the warp's first key
  const size_t bh = (static_cast<size_t>(b) * p.H + h) * p.Tq;
  const size_t kv0 = static_cast<size_t>(b) * p.key_rows * p.ldkv + h * hs;
  load_rows<kOwn, D>(Ks, k + kv0, p.ldkv, k0, p.Tk, hs, fp.vec);
  load_rows<kOwn, D>(Vs, v + kv0, p.ldkv, k0, p.Tk, hs, fp.vec);
  const bool ok[2] = {key_present(p, b, w0 + frag_row(0)), key_present(p, b, w0 + frag_row(2))};  // keys g, g+8
  const bool has_keys = w0 < p.Tk;
  // Causal: query t sees key s only when t >= s - q_pos; the block starts at its first key's first query.
  const int t_start = p.causal ? max(0, k0 - p.q_pos) : 0;
  const float* Kw = Ks + warp * kWarpRows * S;
  const float* Vw = Vs + warp * kWarpRows * S;
  float dk_acc[KB][4] = {}, dv_acc[KB][4] = {};  // dK / scale and dV, C fragments over d
  for (int t0 = t_start; t0 < p.Tq; t0 += kDkvQueries) {
    __syncthreads();  // the previous tile is used up (and Ks, Vs written, the first time)
    load_rows<kDkvQueries, D>(Qs, q + static_cast<size_t>(b) * p.Tq * p.ldq + h * hs, p.ldq, t0, p.Tq, hs, fp.vec);
    load_rows<kDkvQueries, D>(dOs, dout + static_cast<size_t>(b) * p.Tq * p.C + h * hs, p.C, t0, p.Tq, hs, fp.vec);
    if (threadIdx.x < kDkvQueries) {
      const int t = t0 + threadIdx.x;
      lse_s[threadIdx.x] = t < p.Tq ? lse[bh + t] : kInf;
      D_s[threadIdx.x] = t < p.Tq ? Dg[bh + t] : 0.f;
    }
    __syncthreads();
    // Warp-uniform: no keys here, or every query of the tile before the warp's first key.
    if (!has_keys || (p.causal && t0 + kDkvQueries - 1 + p.q_pos < w0)) continue;
    float st[NQ][4] = {}, dpt[NQ][4] = {};
    // S^T = K Q^T and dP^T = V dO^T: A(m, d) = K[m][d], V[m][d]; B(d, j) = Q[j][d], dO[j][d]
    mma_ab<KB, NQ, kP>(
        st, [&](int r, int d) { return Kw[r * S + d]; }, [&](int d, int j) { return Qs[j * S + d]; });
    mma_ab<KB, NQ, kP>(
        dpt, [&](int r, int d) { return Vw[r * S + d]; }, [&](int d, int j) { return dOs[j * S + d]; });
#pragma unroll
    for (int nb = 0; nb < NQ; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int s = w0 + frag_row(i), j = nb * 8 + frag_col(i), t = t0 + j;
        float pd = 0.f, ds = 0.f;
        if (t < p.Tq && ok[i >> 1] && !(p.causal && s > t + p.q_pos)) {
          const float pj = expf(st[nb][i] * p.scale - lse_s[j]);
          const bool keep = kept(p, seed, b, h, t, s);
          pd = keep ? pj * p.keep_scale : 0.f;
          ds = pj * ((keep ? dpt[nb][i] * p.keep_scale : 0.f) - D_s[j]);
        }
        st[nb][i] = pd;
        dpt[nb][i] = ds;
      }
    // dV += dropout(P)^T dO and dK += dS^T Q: B(j, d) = dO[j][d], Q[j][d]
    mma_pb<NQ, KB, kP>(dv_acc, st, [&](int j, int d) { return dOs[j * S + d]; });
    mma_pb<NQ, KB, kP>(dk_acc, dpt, [&](int j, int d) { return Qs[j * S + d]; });
  }
  if (!has_keys) return;
#pragma unroll
  for (int nb = 0; nb < KB; ++nb)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int s = w0 + frag_row(i), d = nb * 8 + frag_col(i);
      if (s < p.Tk && d < hs) {
        const size_t at = (static_cast<size_t>(b) * p.key_rows + s) * p.ldkv + h * hs + d;
        dk[at] = dk_acc[nb][i] * p.scale;
        dv[at] = dv_acc[nb][i];
      }
    }
}

}  // namespace
}  // namespace qkv::kernels::cuda
