#pragma once
// The attention cases the tensor-core kernels are tested on, on the GPU (cuda/flash_attention_test.cpp) and on the
// warp emulator (emulation/flash_emulation_test.cpp): the inputs of a case, the reference executor's outputs, and
// the columns of the backward's outputs that the kernels write.
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kernels.h"
#include "ops/backends.h"
#include "runtime/random.h"
#include "test_util.h"

namespace qkv::test {

struct FlashCase {
  int B, Tq, Tk, H, hs;
  bool causal, pad;
  float dropout;
  int q_pos = 0, extra_rows = 0;  // a KV cache: queries at q_pos.., k_rows = Tk + extra_rows
};

// Inputs: q (B*Tq, ldq), k and v interleaved in kv (B*k_rows, ldkv: k at column 0, v at C), dout (B*Tq, C);
// key_pad (B, k_rows), batch 0 all padding when c.pad. Leading dimensions past C (ldq = C + 5, ldkv = 2C + 4:
// scalar loads), or exactly C and 2C when aligned (the float4 loads where C % 4 == 0).
struct FlashInputs {
  int C, ldq, ldkv, krows;
  std::vector<float> q, kv, dout;
  std::vector<uint8_t> pad;
  FlashInputs(const FlashCase& c, uint64_t seed, bool aligned = false)
      : C(c.H * c.hs), ldq(aligned ? C : C + 5), ldkv(aligned ? 2 * C : 2 * C + 4), krows(c.Tk + c.extra_rows) {
    q = randn(static_cast<size_t>(c.B) * c.Tq * ldq, seed);
    kv = randn(static_cast<size_t>(c.B) * krows * ldkv, seed + 1);
    dout = randn(static_cast<size_t>(c.B) * c.Tq * C, seed + 2);
    pad.assign(static_cast<size_t>(c.B) * krows, 0);
    if (c.pad) {
      Rng rng(seed + 3);
      for (auto& p : pad) p = rng.uniform() < 0.3;
      for (int s = 0; s < krows; ++s) pad[static_cast<size_t>(s)] = 1;  // batch 0: every key padded
    }
  }
  // key_pad: where the padding flags are for the executor at hand (host or device memory); ignored unless c.pad.
  kernels::AttentionShape shape(const FlashCase& c, const uint8_t* key_pad) const {
    return kernels::AttentionShape{c.B,      c.Tq,      c.Tk, C,       c.H,  ldq, ldkv, c.pad ? key_pad : nullptr,
                                   c.causal, c.dropout, 77,   c.q_pos, krows};
  }
};

// Forward (out, lse) and backward (dq, dk and dv inside dkv) outputs, host memory.
struct FlashOutputs {
  std::vector<float> out, lse, dq, dkv;
};

inline FlashOutputs flash_reference(const FlashCase& c, const FlashInputs& in) {
  static const std::unique_ptr<ops::Backend> ref = ops::make_reference_backend();
  const kernels::AttentionShape s = in.shape(c, in.pad.data());
  FlashOutputs r;
  r.out.assign(static_cast<size_t>(c.B) * c.Tq * in.C, 0.f);
  r.lse.assign(static_cast<size_t>(c.B) * c.H * c.Tq, 0.f);
  r.dq.assign(in.q.size(), 0.f);
  r.dkv.assign(in.kv.size(), 0.f);
  std::vector<float> scratch(ref->attention_scratch_size(s, 1));
  const float* kv = in.kv.data();
  ref->attention_forward(r.out, r.lse, in.q.data(), kv, kv + in.C, s, scratch);
  ref->attention_backward(r.dq.data(), r.dkv.data(), r.dkv.data() + in.C, in.dout, in.q.data(), kv, kv + in.C, r.out,
                          r.lse, s, scratch);
  return r;
}

// The heads' columns of the written rows: dq's first C of each ldq-wide row; dk and dv (2C of each ldkv-wide row)
// in the rows < Tk of each batch.
inline std::vector<float> dq_columns(const FlashCase& c, const FlashInputs& in, const std::vector<float>& dq) {
  std::vector<float> r;
  for (size_t row = 0; row < static_cast<size_t>(c.B) * c.Tq; ++row)
    for (int i = 0; i < in.C; ++i) r.push_back(dq[row * in.ldq + i]);
  return r;
}
inline std::vector<float> dkv_columns(const FlashCase& c, const FlashInputs& in, const std::vector<float>& dkv) {
  std::vector<float> r;
  for (int b = 0; b < c.B; ++b)
    for (int t = 0; t < c.Tk; ++t)
      for (int i = 0; i < 2 * in.C; ++i) r.push_back(dkv[(static_cast<size_t>(b) * in.krows + t) * in.ldkv + i]);
  return r;
}

}  // namespace qkv::test
