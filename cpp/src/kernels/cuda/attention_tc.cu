// Attention forward on tensor cores: FlashAttention-2's forward with mma.sync (m16n8k8, TF32 inputs, fp32
// accumulation). attention.cu's CUDA-core kernel stays the fallback (head sizes this file has no instance for,
// GPUs before sm_80) and the reference the tests hold this one to.
// Legend: g = lane / 4 (the fragment's row group), c = lane % 4 (its column pair), Br query rows per warp (16),
// Bc keys per tile (64), HS the head size (a template parameter: 16, 32, 64, 96 or 128).
//
// A block of kWarps warps takes 16 * kWarps query rows of one (b, h); each warp its own 16. Per key tile:
//   S (16, Bc) = Q_w K^T * scale           HS/8 k-steps x Bc/8 n-tiles of mma; the masks set -inf
//   m' = max(m, rowmax S), P = exp(S - m'), alpha = exp(m - m'), l = alpha l + rowsum P
//   O (16, HS) = alpha O + dropout(P) V     Bc/8 k-steps x HS/8 n-tiles, P staged through shared memory (the
//                                           accumulator's fragment layout is not the A operand's)
// then out = O / l and lse = m + log l (+inf and out 0 when every key is masked), as attention.cu.
// Precision: the default keeps fp32 accuracy with 3xTF32 (x = big + small, both TF32; a b ~ big_a big_b +
// big_a small_b + small_a big_b; the dropped small_a small_b is ~2^-22 relative), so the CPU parity tests hold;
// with set_gemm_tf32(true) one TF32 product per mma (10-bit mantissas), as cuBLAS's TF32 mode.
// Fragments (PTX ISA, mma.m16n8k8 .tf32): A a0 (g, c) a1 (g+8, c) a2 (g, c+4) a3 (g+8, c+4); B b0 (k=c, n=g)
// b1 (k=c+4, n=g); C/D d0 (g, 2c) d1 (g, 2c+1) d2 (g+8, 2c) d3 (g+8, 2c+1).
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dropout_hash.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kBr = 16;  // query rows per warp: mma's M
constexpr int kBc = 64;  // keys per tile

struct TcParams {
  int B, Tq, Tk, H, C, ldq, ldkv, key_rows, q_pos;
  bool causal, drop, tf32;
  const uint8_t* key_pad;
  float scale, keep_scale;
  uint32_t threshold;
  uint64_t seed;
};

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
  return u;
}

// x as big + small TF32 parts (small = 0 in TF32 mode).
struct Split {
  uint32_t big, small;
};
__device__ __forceinline__ Split split(float x, bool tf32) {
  const uint32_t b = to_tf32(x);
  return {b, tf32 ? 0u : to_tf32(x - __uint_as_float(b))};
}

__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  (void)d, (void)a, (void)b;
  __trap();  // the host never launches this kernel below sm_80
#endif
}

// d += A B in fp32-accurate (3xTF32) or TF32 arithmetic; a and b as fp32 values in fragment order.
__device__ __forceinline__ void mma3(float (&d)[4], const float (&a)[4], const float (&b)[2], bool tf32) {
  uint32_t ab[4], as[4], bb[2], bs[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const Split s = split(a[i], tf32);
    ab[i] = s.big, as[i] = s.small;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const Split s = split(b[i], tf32);
    bb[i] = s.big, bs[i] = s.small;
  }
  if (!tf32) {
    mma(d, as, bb);  // the small terms first: they are the smaller numbers
    mma(d, ab, bs);
  }
  mma(d, ab, bb);
}

__device__ __forceinline__ bool visible(const TcParams& p, int b, int t, int s) {
  if (t >= p.Tq || s >= p.Tk || (p.causal && s > t + p.q_pos)) return false;
  return !(p.key_pad && p.key_pad[static_cast<size_t>(b) * p.key_rows + s]);
}

__device__ __forceinline__ float dropped(const TcParams& p, float x, int b, int h, int t, int s) {
  if (!p.drop) return x;
  const uint64_t at = ((static_cast<uint64_t>(b) * p.H + h) * p.Tq + t) * p.Tk + s;
  return dropout_hash(p.seed, at) >= p.threshold ? x * p.keep_scale : 0.f;
}

// grid (ceil(Tq / (16 kWarps)), H, B), kWarps * 32 threads; dynamic shared memory: tc_smem_floats(HS).
template <int HS>
__global__ void __launch_bounds__(kWarps* kWarp)
    attention_forward_tc_kernel(float* out, float* lse, const float* q, const float* k, const float* v, TcParams p) {
  constexpr int ld = HS + 4;    // row stride of the Q, K and V tiles (+4: fragment loads spread over the banks)
  constexpr int ldp = kBc + 4;  // row stride of a warp's P tile
  extern __shared__ float smem[];
  float* Qs = smem;                    // (16 kWarps, ld)
  float* Ks = Qs + kWarps * kBr * ld;  // (kBc, ld)
  float* Vs = Ks + kBc * ld;           // (kBc, ld)
  float* Ps = Vs + kBc * ld;           // kWarps x (16, ldp)
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
  const int b = blockIdx.z, h = blockIdx.y, row0 = blockIdx.x * kWarps * kBr;
  float* Pw = Ps + warp * kBr * ldp;

  // The block's query rows (zeros past Tq), once.
  for (int e = threadIdx.x; e < kWarps * kBr * HS; e += blockDim.x) {
    const int r = e / HS, d = e % HS, t = row0 + r;
    Qs[r * ld + d] = t < p.Tq ? q[(static_cast<size_t>(b) * p.Tq + t) * p.ldq + h * HS + d] : 0.f;
  }
  const float* kh = k + static_cast<size_t>(b) * p.key_rows * p.ldkv + h * HS;
  const float* vh = v + static_cast<size_t>(b) * p.key_rows * p.ldkv + h * HS;
  const int t_lo = row0 + warp * kBr + g, t_hi = t_lo + 8;  // this lane's two rows
  const int t_last = min(p.Tq - 1, row0 + kWarps * kBr - 1);
  const int s_end = p.causal ? min(p.Tk, t_last + p.q_pos + 1) : p.Tk;
  const float* Qw = Qs + warp * kBr * ld;

  float o[HS / 8][4] = {};
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
  for (int s0 = 0; s0 < s_end; s0 += kBc) {
    __syncthreads();  // the previous tile is used up (and Qs written, the first time)
    for (int e = threadIdx.x; e < kBc * HS; e += blockDim.x) {
      const int j = e / HS, d = e % HS;
      const bool in = s0 + j < p.Tk;
      Ks[j * ld + d] = in ? kh[static_cast<size_t>(s0 + j) * p.ldkv + d] : 0.f;
      Vs[j * ld + d] = in ? vh[static_cast<size_t>(s0 + j) * p.ldkv + d] : 0.f;
    }
    __syncthreads();

    // S = Q K^T: n-tile n covers keys s0 + 8n .. s0 + 8n + 7.
    float S[kBc / 8][4] = {};
#pragma unroll
    for (int ks = 0; ks < HS / 8; ++ks) {
      const float a[4] = {Qw[g * ld + ks * 8 + c], Qw[(g + 8) * ld + ks * 8 + c], Qw[g * ld + ks * 8 + c + 4],
                          Qw[(g + 8) * ld + ks * 8 + c + 4]};
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n) {
        const float bf[2] = {Ks[(n * 8 + g) * ld + ks * 8 + c], Ks[(n * 8 + g) * ld + ks * 8 + c + 4]};
        mma3(S[n], a, bf, p.tf32);
      }
    }
    // Scale and mask; this lane's elements: rows t_lo (S[n][0..1]) and t_hi (S[n][2..3]), keys s0 + 8n + 2c + {0,1}.
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int t = i < 2 ? t_lo : t_hi, s = s0 + n * 8 + 2 * c + (i & 1);
        S[n][i] = visible(p, b, t, s) ? S[n][i] * p.scale : -INFINITY;
        if (i < 2)
          mx_lo = fmaxf(mx_lo, S[n][i]);
        else
          mx_hi = fmaxf(mx_hi, S[n][i]);
      }
      // The row's maximum over the 4 lanes of its group.
#pragma unroll
    for (int o2 = 1; o2 < 4; o2 <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(kFullMask, mx_lo, o2));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(kFullMask, mx_hi, o2));
    }
    const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
    // Nothing visible yet in a row: its scale factors are 0 and its P stays 0 (no exp(-inf - -inf)).
    const float al_lo = mn_lo == -INFINITY ? 1.f : expf(m_lo - mn_lo);
    const float al_hi = mn_hi == -INFINITY ? 1.f : expf(m_hi - mn_hi);
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool lo = i < 2;
        const float mref = lo ? mn_lo : mn_hi;
        const float pj = S[n][i] == -INFINITY ? 0.f : expf(S[n][i] - mref);
        (lo ? sum_lo : sum_hi) += pj;
        const int t = lo ? t_lo : t_hi, s = s0 + n * 8 + 2 * c + (i & 1);
        Pw[(lo ? g : g + 8) * ldp + n * 8 + 2 * c + (i & 1)] = pj == 0.f ? 0.f : dropped(p, pj, b, h, t, s);
      }
#pragma unroll
    for (int o2 = 1; o2 < 4; o2 <<= 1) {
      sum_lo += __shfl_xor_sync(kFullMask, sum_lo, o2);
      sum_hi += __shfl_xor_sync(kFullMask, sum_hi, o2);
    }
    l_lo = l_lo * al_lo + sum_lo;
    l_hi = l_hi * al_hi + sum_hi;
    m_lo = mn_lo;
    m_hi = mn_hi;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      o[n][0] *= al_lo, o[n][1] *= al_lo;
      o[n][2] *= al_hi, o[n][3] *= al_hi;
    }
    __syncwarp();  // Pw written by every lane of the warp
                   // O += Pd V: k-steps over the tile's keys, n-tiles over the head's columns.
#pragma unroll
    for (int ks = 0; ks < kBc / 8; ++ks) {
      const float a[4] = {Pw[g * ldp + ks * 8 + c], Pw[(g + 8) * ldp + ks * 8 + c], Pw[g * ldp + ks * 8 + c + 4],
                          Pw[(g + 8) * ldp + ks * 8 + c + 4]};
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        const float bf[2] = {Vs[(ks * 8 + c) * ld + n * 8 + g], Vs[(ks * 8 + c + 4) * ld + n * 8 + g]};
        mma3(o[n], a, bf, p.tf32);
      }
    }
    __syncwarp();  // every lane has read Pw before the next tile overwrites it
  }

  const float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f, inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
#pragma unroll
  for (int n = 0; n < HS / 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = i < 2 ? t_lo : t_hi;
      if (t < p.Tq)
        out[(static_cast<size_t>(b) * p.Tq + t) * p.C + h * HS + n * 8 + 2 * c + (i & 1)] =
            o[n][i] * (i < 2 ? inv_lo : inv_hi);
    }
  if (c == 0) {
    const size_t at = (static_cast<size_t>(b) * p.H + h) * p.Tq;
    if (t_lo < p.Tq) lse[at + t_lo] = l_lo > 0.f ? m_lo + logf(l_lo) : INFINITY;
    if (t_hi < p.Tq) lse[at + t_hi] = l_hi > 0.f ? m_hi + logf(l_hi) : INFINITY;
  }
}

constexpr size_t tc_smem_floats(int hs) {
  return static_cast<size_t>(kWarps * kBr + 2 * kBc) * (hs + 4) + static_cast<size_t>(kWarps) * kBr * (kBc + 4);
}

template <int HS>
void launch(float* out, float* lse, const float* q, const float* k, const float* v, const AttentionShape& s,
            const TcParams& p) {
  const size_t bytes = tc_smem_floats(HS) * sizeof(float);
  static const bool opted_in = [&] {  // more than the default 48 KiB of shared memory, asked for once
    check_cuda(cudaFuncSetAttribute(attention_forward_tc_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)),
               "attention_forward", "cudaFuncSetAttribute");
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>((s.Tq + kWarps * kBr - 1) / (kWarps * kBr)), static_cast<unsigned>(s.H),
                  static_cast<unsigned>(s.B));
  attention_forward_tc_kernel<HS><<<grid, kWarps * kWarp, bytes>>>(out, lse, q, k, v, p);
  check_launch("attention_forward");
}

std::atomic<int> forced{-1};  // set_attention_tensor_cores: -1 automatic, 0 never, 1 where supported

bool gpu_has_mma() {
  static const bool has = [] {
    int dev = 0, major = 0;
    check_cuda(cudaGetDevice(&dev), "attention_forward", "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "attention_forward",
               "cudaDeviceGetAttribute");
    return major >= 8;
  }();
  return has;
}

}  // namespace

void set_attention_tensor_cores(int mode) { forced.store(mode); }

bool attention_forward_tensor_cores(float* out, float* lse, const float* q, const float* k, const float* v,
                                    const AttentionShape& s) {
  const int hs = s.C / s.H;
  int mode = forced.load();
  if (mode < 0) {  // automatic: on, unless QKV_CUDA_ATTENTION=cores asks for the CUDA-core kernel (A/B runs)
    const char* env = std::getenv("QKV_CUDA_ATTENTION");
    mode = env && std::strcmp(env, "cores") == 0 ? 0 : 1;
  }
  if (mode == 0 || !gpu_has_mma() || s.B == 0 || s.Tq == 0) return false;
  if (hs != 16 && hs != 32 && hs != 64 && hs != 96 && hs != 128) return false;
  TcParams p{};
  p.B = s.B, p.Tq = s.Tq, p.Tk = s.Tk, p.H = s.H, p.C = s.C, p.ldq = s.ldq, p.ldkv = s.ldkv;
  p.key_rows = s.key_rows(), p.q_pos = s.q_pos, p.causal = s.causal, p.key_pad = s.key_pad;
  p.scale = 1.f / sqrtf(static_cast<float>(hs));  // the CPU's 1 / sqrt(hs), in float
  p.drop = s.dropout > 0.f;
  p.keep_scale = p.drop ? 1.f / (1.f - s.dropout) : 1.f;
  p.threshold = dropout_threshold(s.dropout);
  p.seed = s.seed;
  p.tf32 = gemm_tf32();
  switch (hs) {
    case 16: launch<16>(out, lse, q, k, v, s, p); break;
    case 32: launch<32>(out, lse, q, k, v, s, p); break;
    case 64: launch<64>(out, lse, q, k, v, s, p); break;
    case 96: launch<96>(out, lse, q, k, v, s, p); break;
    default: launch<128>(out, lse, q, k, v, s, p); break;
  }
  return true;
}

}  // namespace qkv::kernels::cuda
