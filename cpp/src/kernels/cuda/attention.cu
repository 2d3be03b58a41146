// Fused multi-head attention on FP32 CUDA cores, a warp per row: the GPU reference of the tensor-core kernels
// (flash_attention.cu), which the backend runs instead; this file also keeps attention_weights. The (Tq,Tk) score
// matrix is never stored (kernels.h: attention_*).
// reference: https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html
// Legend: b batch, h head, t query, s key, d a column of the head (hs = C/H of them), j a key within a tile.
//
// The scheme (FlashAttention's online softmax on plain CUDA cores; no tensor cores yet):
//   a block holds kRows warps, one per query row (backward dk/dv: one per key row), and walks the other side
//   in tiles of kTile = 32 rows staged through shared memory; within a tile, lane j owns row j for the dot
//   products (a full hs-long dot each: no shuffle per key) and lane j owns columns j, j+32, ... of the
//   accumulators (so hs <= 4 * 32 = kAttentionMaxHeadSize), with the 32 weights passed around by shuffles.
// Forward, per key tile (m running max, l running sum, o the unnormalised output, in registers):
//   S_j = q . k_j / sqrt(hs) (masked: -inf);  m' = max(m, max_j S_j);  P_j = exp(S_j - m');  alpha = exp(m - m')
//   l = alpha * l + sum_j P_j;  o = alpha * o + sum_j dropout(P_j) v_j
// then out = o / l and lse = m + log(l) (saved; +inf, with out = 0, when every key is masked).
// Backward (P recomputed as exp(S - lse)), in two kernels so that each output has one writer (no atomics):
//   D_t = rowsum(dout_t * out_t)                                   (attention_rows_kernel)
//   dP = dropout_backward(dout . v_s),  dS = P * (dP - D_t)
//   dq_t = sum_s dS k_s / sqrt(hs)                                  (a warp per query, key tiles)
//   dv_s = sum_t dropout(P) dout_t,  dk_s = sum_t dS q_t / sqrt(hs)  (a warp per key, query tiles)
// The dropout mask of element (b,h,t,s) is dropout_hash(seed, ((b*H + h)*Tq + t)*Tk + s), the CPU's.
// Masks: causal hides s > t + q_pos, key_pad (device, (B, key_rows)) hides padded keys; under the causal
// mask tiles wholly past a block's last query are skipped.
// Status: correct-first, plain fp32 arithmetic: the tests and the benchmark hold the tensor-core kernels against it
// (measured on an H100 at f497379: forward 0.84 ms, backward 2.19 ms at the char GPT's shapes).
#include "kernels/cuda/attention_common.cuh"

namespace qkv::kernels::cuda {
namespace {

constexpr int kTile = kWarp;  // rows of the other side per shared-memory tile: one per lane
constexpr int kRows = 8;      // warps per block
constexpr int kThreads = kRows * kWarp;
constexpr int kMaxHs = kAttentionMaxHeadSize;
constexpr int kPerLane = kMaxHs / kWarp;  // accumulator columns per lane
constexpr int kPad = kMaxHs + 1;          // tile row stride: lane j reading row j hits bank (j + d) % 32

using Params = AttentionParams;

// rows [r0, r0 + kTile) of src (row stride ld, the head's columns at src) into tile (kTile, kPad); zeros past
// `limit` rows. All threads of the block take part.
__device__ inline void load_tile(float (*tile)[kPad], const float* src, size_t ld, int r0, int limit, int hs) {
  for (int e = threadIdx.x; e < kTile * hs; e += blockDim.x) {
    const int j = e / hs, d = e % hs;
    tile[j][d] = r0 + j < limit ? src[static_cast<size_t>(r0 + j) * ld + d] : 0.f;
  }
}

__device__ inline float dot(const float* a, const float* b, int hs) {
  float s = 0.f;
  for (int d = 0; d < hs; ++d) s += a[d] * b[d];
  return s;
}

// grid (ceil(Tq / kRows), H, B); warp w of block x takes query t = x * kRows + w.
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, Params p) {
  const uint64_t seed = seed_of(p);
  __shared__ float ks[kTile][kPad];
  __shared__ float vs[kTile][kPad];
  __shared__ float qs[kRows][kMaxHs];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int b = blockIdx.z, h = blockIdx.y, t = blockIdx.x * kRows + warp, hs = p.hs;
  const bool active = t < p.Tq;  // the same for the whole warp
  if (active)
    for (int d = lane; d < hs; d += kWarp) qs[warp][d] = q[(static_cast<size_t>(b) * p.Tq + t) * p.ldq + h * hs + d];
  const float* kh = k + static_cast<size_t>(b) * p.key_rows * p.ldkv + h * hs;
  const float* vh = v + static_cast<size_t>(b) * p.key_rows * p.ldkv + h * hs;
  const int t_last = min(p.Tq - 1, (static_cast<int>(blockIdx.x) + 1) * kRows - 1);
  const int s_end = p.causal ? min(p.Tk, t_last + p.q_pos + 1) : p.Tk;
  float o[kPerLane] = {};
  float m = -INFINITY, l = 0.f;
  for (int s0 = 0; s0 < s_end; s0 += kTile) {
    __syncthreads();  // the previous tile is used up (and qs written, the first time)
    load_tile(ks, kh, p.ldkv, s0, p.Tk, hs);
    load_tile(vs, vh, p.ldkv, s0, p.Tk, hs);
    __syncthreads();
    if (!active) continue;
    const int s = s0 + lane;
    const bool vis = visible(p, b, t, s);
    const float score = vis ? dot(qs[warp], ks[lane], hs) * p.scale : -INFINITY;
    const float m_new = fmaxf(m, warp_max(score));
    if (m_new == -INFINITY) continue;  // nothing visible yet (uniform across the warp)
    const float pj = vis ? expf(score - m_new) : 0.f;
    const float alpha = expf(m - m_new);  // 0 the first time (m = -inf)
    l = l * alpha + warp_sum(pj);
    m = m_new;
    const float pd = kept(p, seed, b, h, t, s) ? pj * p.keep_scale : 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) o[i] *= alpha;
    for (int j = 0; j < kTile; ++j) {
      const float w = __shfl_sync(kFullMask, pd, j);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int d = lane + i * kWarp;
        if (d < hs) o[i] += w * vs[j][d];
      }
    }
  }
  if (!active) return;
  const size_t row = static_cast<size_t>(b) * p.Tq + t;
  const float inv = l > 0.f ? 1.f / l : 0.f;  // every key masked: output 0
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    if (d < hs) out[row * p.C + h * hs + d] = o[i] * inv;
  }
  if (lane == 0) lse[(static_cast<size_t>(b) * p.H + h) * p.Tq + t] = l > 0.f ? m + logf(l) : INFINITY;
}

// D (B,H,Tq) = rowsum(dout * out) over each head's columns; a warp per (b, h, t).
__global__ void attention_rows_kernel(float* D, const float* dout, const float* out, Params p) {
  const size_t r = blockIdx.x * static_cast<size_t>(kRows) + threadIdx.x / kWarp;  // (b * H + h) * Tq + t
  const int lane = threadIdx.x % kWarp;
  if (r >= static_cast<size_t>(p.B) * p.H * p.Tq) return;
  const int t = static_cast<int>(r % p.Tq), h = static_cast<int>(r / p.Tq % p.H), b = static_cast<int>(r / p.Tq / p.H);
  const size_t o = (static_cast<size_t>(b) * p.Tq + t) * p.C + h * p.hs;
  float s = 0.f;
  for (int d = lane; d < p.hs; d += kWarp) s += dout[o + d] * out[o + d];
  s = warp_sum(s);
  if (lane == 0) D[r] = s;
}

// dq; grid (ceil(Tq / kRows), H, B), a warp per query, key tiles.
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(float* dq, const float* dout, const float* q, const float* k, const float* v, const float* lse,
                        const float* D, Params p) {
  const uint64_t seed = seed_of(p);
  __shared__ float ks[kTile][kPad];
  __shared__ float vs[kTile][kPad];
  __shared__ float qs[kRows][kMaxHs];
  __shared__ float dos[kRows][kMaxHs];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int b = blockIdx.z, h = blockIdx.y, t = blockIdx.x * kRows + warp, hs = p.hs;
  const bool active = t < p.Tq;
  const size_t row = static_cast<size_t>(b) * p.Tq + t;
  const size_t bht = (static_cast<size_t>(b) * p.H + h) * p.Tq + t;
  float lse_t = 0.f, D_t = 0.f;
  if (active) {
    for (int d = lane; d < hs; d += kWarp) {
      qs[warp][d] = q[row * p.ldq + h * hs + d];
      dos[warp][d] = dout[row * p.C + h * hs + d];
    }
    lse_t = lse[bht];
    D_t = D[bht];
  }
  const float* kh = k + static_cast<size_t>(b) * p.key_rows * p.ldkv + h * hs;
  const float* vh = v + static_cast<size_t>(b) * p.key_rows * p.ldkv + h * hs;
  const int t_last = min(p.Tq - 1, (static_cast<int>(blockIdx.x) + 1) * kRows - 1);
  const int s_end = p.causal ? min(p.Tk, t_last + p.q_pos + 1) : p.Tk;
  float acc[kPerLane] = {};
  for (int s0 = 0; s0 < s_end; s0 += kTile) {
    __syncthreads();
    load_tile(ks, kh, p.ldkv, s0, p.Tk, hs);
    load_tile(vs, vh, p.ldkv, s0, p.Tk, hs);
    __syncthreads();
    if (!active) continue;
    const int s = s0 + lane;
    float ds = 0.f;
    if (visible(p, b, t, s)) {
      const float pj = expf(dot(qs[warp], ks[lane], hs) * p.scale - lse_t);
      const float dpd = dot(dos[warp], vs[lane], hs);
      const float dp = kept(p, seed, b, h, t, s) ? dpd * p.keep_scale : 0.f;
      ds = pj * (dp - D_t);
    }
    for (int j = 0; j < kTile; ++j) {
      const float w = __shfl_sync(kFullMask, ds, j);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int d = lane + i * kWarp;
        if (d < hs) acc[i] += w * ks[j][d];
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    if (d < hs) dq[row * p.ldq + h * hs + d] = acc[i] * p.scale;
  }
}

// dk, dv; grid (ceil(Tk / kRows), H, B), a warp per key, query tiles.
__global__ void __launch_bounds__(kThreads)
    attention_dkv_kernel(float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                         const float* lse, const float* D, Params p) {
  const uint64_t seed = seed_of(p);
  __shared__ float qs[kTile][kPad];
  __shared__ float dos[kTile][kPad];
  __shared__ float kw[kRows][kMaxHs];
  __shared__ float vw[kRows][kMaxHs];
  __shared__ float lse_s[kTile], D_s[kTile];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int b = blockIdx.z, h = blockIdx.y, s = blockIdx.x * kRows + warp, hs = p.hs;
  const bool active = s < p.Tk;
  const size_t krow = static_cast<size_t>(b) * p.key_rows + s;
  if (active)
    for (int d = lane; d < hs; d += kWarp) {
      kw[warp][d] = k[krow * p.ldkv + h * hs + d];
      vw[warp][d] = v[krow * p.ldkv + h * hs + d];
    }
  const float* qh = q + static_cast<size_t>(b) * p.Tq * p.ldq + h * hs;
  const float* doh = dout + static_cast<size_t>(b) * p.Tq * p.C + h * hs;
  const size_t bh = (static_cast<size_t>(b) * p.H + h) * p.Tq;
  // Causal: query t sees key s only when t >= s - q_pos; start at the block's first key's first query.
  const int t_start = p.causal ? max(0, static_cast<int>(blockIdx.x) * kRows - p.q_pos) : 0;
  float dk_acc[kPerLane] = {}, dv_acc[kPerLane] = {};
  for (int t0 = t_start; t0 < p.Tq; t0 += kTile) {
    __syncthreads();
    load_tile(qs, qh, p.ldq, t0, p.Tq, hs);
    load_tile(dos, doh, p.C, t0, p.Tq, hs);
    if (threadIdx.x < kTile) {
      const int t = t0 + threadIdx.x;
      lse_s[threadIdx.x] = t < p.Tq ? lse[bh + t] : INFINITY;
      D_s[threadIdx.x] = t < p.Tq ? D[bh + t] : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    const int t = t0 + lane;
    float pd = 0.f, ds = 0.f;
    if (t < p.Tq && visible(p, b, t, s)) {
      const float pj = expf(dot(qs[lane], kw[warp], hs) * p.scale - lse_s[lane]);
      const float dpd = dot(dos[lane], vw[warp], hs);
      const bool keep = kept(p, seed, b, h, t, s);
      pd = keep ? pj * p.keep_scale : 0.f;
      ds = pj * ((keep ? dpd * p.keep_scale : 0.f) - D_s[lane]);
    }
    for (int j = 0; j < kTile; ++j) {
      const float wp = __shfl_sync(kFullMask, pd, j), ws = __shfl_sync(kFullMask, ds, j);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int d = lane + i * kWarp;
        if (d < hs) {
          dv_acc[i] += wp * dos[j][d];
          dk_acc[i] += ws * qs[j][d];
        }
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    if (d < hs) {
      dk[krow * p.ldkv + h * hs + d] = dk_acc[i] * p.scale;
      dv[krow * p.ldkv + h * hs + d] = dv_acc[i];
    }
  }
}

// att (B,H,Tq,Tk) = the masked softmax of each row of scores; a warp per (b, h, t), lane s over the keys.
__global__ void attention_weights_kernel(float* att, const float* q, const float* k, Params p) {
  const size_t r = blockIdx.x * static_cast<size_t>(kRows) + threadIdx.x / kWarp;  // (b * H + h) * Tq + t
  const int lane = threadIdx.x % kWarp;
  if (r >= static_cast<size_t>(p.B) * p.H * p.Tq) return;
  const int t = static_cast<int>(r % p.Tq), h = static_cast<int>(r / p.Tq % p.H), b = static_cast<int>(r / p.Tq / p.H);
  const float* qr = q + (static_cast<size_t>(b) * p.Tq + t) * p.ldq + h * p.hs;
  const float* kh = k + static_cast<size_t>(b) * p.key_rows * p.ldkv + h * p.hs;
  float* row = att + r * p.Tk;
  float mx = -INFINITY;
  for (int s = lane; s < p.Tk; s += kWarp) {
    const float score = visible(p, b, t, s) ? dot(qr, kh + static_cast<size_t>(s) * p.ldkv, p.hs) * p.scale : -INFINITY;
    row[s] = score;  // this lane reads back only what it wrote
    mx = fmaxf(mx, score);
  }
  mx = warp_max(mx);
  float sum = 0.f;
  for (int s = lane; s < p.Tk; s += kWarp) {
    const float e = row[s] == -INFINITY ? 0.f : expf(row[s] - mx);
    row[s] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  const float inv = sum > 0.f ? 1.f / sum : 0.f;  // every key masked: zero weights
  for (int s = lane; s < p.Tk; s += kWarp) row[s] *= inv;
}

dim3 grid_of(int rows, const AttentionShape& s) {
  return dim3(static_cast<unsigned>((rows + kRows - 1) / kRows), static_cast<unsigned>(s.H),
              static_cast<unsigned>(s.B));
}

unsigned row_blocks(const AttentionShape& s) {
  return static_cast<unsigned>((static_cast<size_t>(s.B) * s.H * s.Tq + kRows - 1) / kRows);
}

}  // namespace

void attention_forward_rowwise(float* out, float* lse, const float* q, const float* k, const float* v,
                               const AttentionShape& s) {
  const char* op = "attention_forward";
  check_attention_shape(op, s);
  if (s.B == 0 || s.Tq == 0) return;
  check(out && lse && q && (s.Tk == 0 || (k && v)), op, " (cuda): null device pointer");
  attention_forward_kernel<<<grid_of(s.Tq, s), kThreads, 0, stream()>>>(out, lse, q, k, v, attention_params(s));
  check_launch(op);
}

void attention_backward_rowwise(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* q,
                                const float* k, const float* v, const float* out, const float* lse,
                                const AttentionShape& s) {
  const char* op = "attention_backward";
  check_attention_shape(op, s);
  if (s.B == 0 || (s.Tq == 0 && s.Tk == 0)) return;
  check(dq && dk && dv && scratch && dout && q && k && v && out && lse, op, " (cuda): null device pointer");
  const Params p = attention_params(s);
  if (s.Tq > 0) {
    attention_rows_kernel<<<row_blocks(s), kThreads, 0, stream()>>>(scratch, dout, out, p);
    check_launch(op);
    attention_dq_kernel<<<grid_of(s.Tq, s), kThreads, 0, stream()>>>(dq, dout, q, k, v, lse, scratch, p);
    check_launch(op);
  }
  if (s.Tk > 0) {
    attention_dkv_kernel<<<grid_of(s.Tk, s), kThreads, 0, stream()>>>(dk, dv, dout, q, k, v, lse, scratch, p);
    check_launch(op);
  }
}

void attention_weights(float* att, const float* q, const float* k, const AttentionShape& s) {
  const char* op = "attention_weights";
  check_attention_shape(op, s);
  if (s.B == 0 || s.Tq == 0 || s.Tk == 0) return;
  check(att && q && k, op, " (cuda): null device pointer");
  attention_weights_kernel<<<row_blocks(s), kThreads, 0, stream()>>>(att, q, k, attention_params(s));
  check_launch(op);
}

}  // namespace qkv::kernels::cuda
