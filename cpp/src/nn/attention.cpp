#include "nn/attention.h"

#include "kernels/kernels.h"

namespace qkv::nn {

CausalSelfAttention::CausalSelfAttention(Parameters& params, const std::string& prefix, int C, int H, float init_std,
                                         float out_init_std)
    : C_(C),
      H_(H),
      in_proj_(params, prefix + ".in_proj_weight", prefix + ".in_proj_bias", C, 3 * C, init_std),
      out_proj_(params, prefix + ".out_proj.weight", prefix + ".out_proj.bias", C, C, out_init_std) {}

void CausalSelfAttention::plan(Workspace& ws, int B, int T) {
  const size_t rows = static_cast<size_t>(B) * T, tt = static_cast<size_t>(B) * H_ * T * T;
  qkv_ = ws.take(rows * 3 * C_);
  att_ = ws.take(tt);
  y_ = ws.take(rows * C_);
  dqkv_ = ws.take(rows * 3 * C_);
  datt_ = ws.take(tt);
  dy_ = ws.take(rows * C_);
}

void CausalSelfAttention::forward(Span out, CSpan x, int B, int T) {
  in_proj_.forward(qkv_, x, B * T);
  kernels::attention_forward(y_, att_, qkv_, B, T, C_, H_);
  out_proj_.forward(out, y_, B * T);
}

void CausalSelfAttention::backward(Span dx, CSpan dout, CSpan x, int B, int T) {
  out_proj_.backward(dy_, dout, y_, B * T);
  kernels::attention_backward(dqkv_, datt_, dy_, qkv_, att_, B, T, C_, H_);
  in_proj_.backward(dx, dqkv_, x, B * T);
}

}  // namespace qkv::nn
