#pragma once
// Linear: y = x W^T + b, W (out, in) as torch.nn.Linear stores it.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.Linear.html
#include <string>

#include "nn/parameters.h"

namespace qkv::nn {

class Linear {
 public:
  // weight_name / bias_name are the checkpoint names; an empty bias_name means no bias.
  Linear(Parameters& params, const std::string& weight_name, const std::string& bias_name, int in, int out,
         float init_std);

  // x (rows, in) -> y (rows, out)
  void forward(Span y, CSpan x, int rows) const;
  // dW += dy^T x, db += sum_rows dy; dx (rows, in) = dy W is overwritten, or skipped when dx is empty.
  void backward(Span dx, CSpan dy, CSpan x, int rows);

  int in() const { return in_; }
  int out() const { return out_; }

 private:
  int in_, out_;
  Param& w_;
  Param* b_;
};

}  // namespace qkv::nn
