#pragma once
// Linear: y = act(x W^T + b), W (out, in) as torch.nn.Linear stores it, with an optional activation fused
// into the bias pass (cuBLASLt-style epilogues: kernels::bias_act_*).
// reference: https://pytorch.org/docs/stable/generated/torch.nn.Linear.html
#include <string>

#include "nn/dropout.h"
#include "nn/lora.h"
#include "nn/parameters.h"
#include "nn/saved.h"
#include "qkv/workspace.h"

namespace qkv::nn {

class Linear {
 public:
  // weight_name / bias_name are the checkpoint names; an empty bias_name means no bias. lora_target: the
  // qkv/lora.h target a LoRA adapter on this layer answers to (nullptr: none may sit here).
  Linear(Parameters& params, const std::string& weight_name, const std::string& bias_name, int in, int out,
         float init_std, const char* lora_target = nullptr);

  // The backward's scratch (the bias gradient's column sums, on backends that need any), shared by every Linear;
  // saved: where an adapter keeps what its backward reads (nn/saved.h).
  void plan(Workspace& ws, int rows, const Saved& saved = {});

  // x (rows, in) -> y (rows, out) = x W^T + b
  // `drop`: the pass's, for an adapter's input dropout (qkv/lora.h).
  void forward(Span y, CSpan x, int rows, const Dropout& drop = {});
  // dW += dy^T x, db += sum_rows dy; dx (rows, in) = dy W is overwritten, or skipped when dx is empty.
  // A frozen base (Parameters::frozen) skips dW and db; an adapter adds its gradients and its part of dx.
  // dx may be x's buffer: x is read (dW, the adapter's dA) before dx is written. dx must not alias dy.
  void backward(Span dx, CSpan dy, CSpan x, int rows);

  // With an activation: h (rows, out) = x W^T + b is kept for the backward, y = act(h); y must not alias h.
  void forward(Span y, Span h, CSpan x, int rows, ops::Act act, const Dropout& drop = {});
  // dy (rows, out), the gradient of act's output, is overwritten with the gradient of h (one pass that also
  // sums db); then dW and dx as above.
  void backward(Span dx, Span dy, CSpan h, CSpan x, int rows, ops::Act act);

  int in() const { return in_; }
  int out() const { return out_; }

 private:
  // dW += dy^T x and dx = dy W (skipped when dx is empty): the two products of either backward; then the adapter's.
  void products_backward(Span dx, CSpan dy, CSpan x, int rows);
  LoraAdapter* adapter() const { return site_ ? site_->adapter : nullptr; }

  ops::Backend& ops() const { return params_.ops(); }

  const Parameters& params_;
  int in_, out_;
  Param& w_;
  Param* b_;
  LoraSite* site_;
  Span scratch_, dequant_;
  Dropout drop_;  // the last forward's, for the adapter's mask in the backward
};

}  // namespace qkv::nn
