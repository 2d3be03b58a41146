#pragma once
// What both attention implementations share (attention.cu, the row-wise FP32 reference; flash_attention.cu, the
// tensor-core kernels): the launch parameters by value, the masks, the dropout decision and the host checks, so
// that the two cannot drift apart on what is visible or kept (kernels.h: attention_*).
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dropout_hash.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {

// What every attention kernel needs to know, by value.
struct AttentionParams {
  int B, Tq, Tk, H, hs, C, ldq, ldkv, key_rows, q_pos;
  bool causal, drop;
  const uint8_t* key_pad;  // device, (B, key_rows), or null
  float scale, keep_scale;
  uint32_t threshold;
  uint64_t seed;
  const uint64_t* seed_dev;  // the seed in a captured step's scalar block, or null (step_value)
};

inline AttentionParams attention_params(const AttentionShape& s) {
  AttentionParams p{};
  p.B = s.B, p.Tq = s.Tq, p.Tk = s.Tk, p.H = s.H, p.hs = s.C / s.H, p.C = s.C;
  p.ldq = s.ldq, p.ldkv = s.ldkv, p.key_rows = s.key_rows(), p.q_pos = s.q_pos;
  p.causal = s.causal, p.key_pad = s.key_pad;
  p.scale = 1.f / sqrtf(static_cast<float>(p.hs));  // the CPU's 1 / sqrt(hs), in float
  p.drop = s.dropout > 0.f;
  p.keep_scale = p.drop ? 1.f / (1.f - s.dropout) : 1.f;
  p.threshold = dropout_threshold(s.dropout);
  p.seed = s.seed;
  p.seed_dev = s.seed_device;
  return p;
}

// Key s of batch b is there and not padding (the causal test is separate: it depends on the query).
__device__ inline bool key_present(const AttentionParams& p, int b, int s) {
  return s < p.Tk && !(p.key_pad && p.key_pad[static_cast<size_t>(b) * p.key_rows + s]);
}

// Query t may attend to key s: causal hides s > t + q_pos, key_pad hides padded keys.
__device__ inline bool visible(const AttentionParams& p, int b, int t, int s) {
  return !(p.causal && s > t + p.q_pos) && key_present(p, b, s);
}

// The launch's dropout seed, read once by each kernel (step_value: a captured step's may change per replay).
__device__ inline uint64_t seed_of(const AttentionParams& p) { return step_value(p.seed, p.seed_dev); }

// The dropout mask of weight (b, h, t, s): the CPU's hash of ((b*H + h)*Tq + t)*Tk + s; seed: seed_of(p).
__device__ inline bool kept(const AttentionParams& p, uint64_t seed, int b, int h, int t, int s) {
  return !p.drop || dropout_hash(seed, ((static_cast<uint64_t>(b) * p.H + h) * p.Tq + t) * p.Tk + s) >= p.threshold;
}

// Host-side checks shared by the entries: refused here, before any launch.
inline void check_attention_shape(const char* op, const AttentionShape& s) {
  check(s.B >= 0 && s.Tq >= 0 && s.Tk >= 0, op, " (cuda): B = ", s.B, ", Tq = ", s.Tq, ", Tk = ", s.Tk,
        ": expected >= 0");
  check(s.H > 0 && s.C > 0 && s.C % s.H == 0, op, " (cuda): C = ", s.C, ", H = ", s.H,
        ": expected C divisible by H, both > 0");
  const int hs = s.C / s.H;
  check(hs <= kAttentionMaxHeadSize, op, " (cuda): head size C/H = ", hs, " is above the CUDA kernel's limit ",
        kAttentionMaxHeadSize);
  check(s.key_rows() >= s.Tk, op, " (cuda): k_rows = ", s.k_rows, ": expected >= Tk = ", s.Tk);
  check(s.ldq >= s.C && s.ldkv >= s.C, op, " (cuda): ldq = ", s.ldq, ", ldkv = ", s.ldkv, ": expected >= C = ", s.C);
  check(s.dropout >= 0.f && s.dropout < 1.f, op, " (cuda): dropout = ", s.dropout, ": expected 0 <= p < 1");
  check(s.q_pos >= 0, op, " (cuda): q_pos = ", s.q_pos, ": expected >= 0");
  check(s.H <= 65535 && s.B <= 65535, op, " (cuda): B = ", s.B, ", H = ", s.H, ": expected <= 65535 (grid limits)");
}

}  // namespace qkv::kernels::cuda
