// The token embedding from a packed table (kernels.h: embedding_forward_quant): x[b,t,:] = scale * deq(wte[token])
// + pos[t,:], each element dequantize_element's float, then the same float operations as embedding_forward (so a
// table stored in F16 whose values are halves gives embedding_forward's x bit for bit).
#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

void embedding_forward_quant(Span x, const int32_t* tokens, WeightFormat f, const uint8_t* wte, const float* wte_scales,
                             CSpan pos, float scale, int B, int T, int C) {
  const size_t stride = ops::row_stride(f, C);
  const int spr = ops::scales_per_row(f, C);
  parallel_for(static_cast<int64_t>(B) * T, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const size_t e = static_cast<size_t>(tokens[r]);
      const uint8_t* row = wte + e * stride;
      const float* s = spr ? wte_scales + e * spr : nullptr;
      float* xr = x.data() + r * C;
      if (pos.empty()) {
        for (int i = 0; i < C; ++i) xr[i] = scale * ops::dequantize_element(f, row, s, i) + 0.f;
      } else {
        const float* p = pos.data() + static_cast<size_t>(r % T) * C;
        for (int i = 0; i < C; ++i) xr[i] = scale * ops::dequantize_element(f, row, s, i) + p[i];
      }
    }
  });
}

}  // namespace qkv::kernels
