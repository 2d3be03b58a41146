#pragma once
// The plain types the op contract (ops/ops.h) and the kernels of every device share. Their meaning is
// documented where the ops that take them are (kernels/kernels.h).
#include <cstddef>
#include <cstdint>

namespace qkv::ops {

// A Linear layer's fused epilogue: the bias alone, or the bias then ReLU, exact (erf) GELU or GELU's tanh
// approximation (GPT-2's gelu_new). The values are the WebGPU protocol's act codes (exec/webgpu/webgpu_protocol.h).
enum class Act { Identity, ReLU, GELU, GELUTanh };

// Multi-head scaled dot-product attention's sizes, strides, masks and dropout (kernels.h: attention_forward).
struct AttentionShape {
  int B, Tq, Tk, C, H;
  int ldq, ldkv;
  const uint8_t* key_pad;
  bool causal;
  float dropout;
  uint64_t seed;
  int q_pos = 0;   // causal: query t is key position q_pos + t
  int k_rows = 0;  // rows per batch in k, v (and key_pad); 0 means Tk
  // CUDA only: when set, the kernels read the seed from this device address instead (a captured training step's
  // scalar block, refreshed before each replay: exec/cuda/step_graph.h). Backends set it; layers never do.
  const uint64_t* seed_device = nullptr;
  int key_rows() const { return k_rows > 0 ? k_rows : Tk; }
};

// One Adam(W) step's weight-decay range over the flat buffers, and its hyper-parameters (kernels.h: adam_step).
struct AdamRange {
  size_t begin, end;
  float weight_decay;
};
struct AdamHyper {
  float lr, beta1, beta2, eps;
  bool decoupled;
  int t;
  float grad_scale;  // 1: no clipping
};

}  // namespace qkv::ops
