#pragma once
// Every op of the contract (ops/ops.h) on one executor against another, over ragged shapes: the sweep of
// tests/cpp/ops/backend_ops_test.cpp as a library function, so that it also runs where no test framework
// does (the npm package's checkBackend(): WebGPU against the wasm core, on the user's own GPU).
#include <string>
#include <string_view>
#include <vector>

#include "ops/ops.h"

namespace qkv::ops {

// One output of one case: "gemm 17 64 257 t3 beta 0.500000: C".
struct OpCheck {
  std::string name;
  double error = 0;    // the largest |got - want| / scale (scale: 1, max(1, |want|) or max(1, max |want|))
  double tol = 0;      // what error may reach (0: exact)
  bool ok = true;      // error <= tol, and every element written (no NaN left)
  std::string detail;  // the first element past its bound, when !ok
};

// Runs the cases of `group` ("" = all: copies, gemm, linear, layernorm, bias_act, dropout, attention, embedding,
// mean_pool, crossentropy, adam, quant) on `be` and on `oracle` with the same inputs. Throws qkv::Error for an
// unknown group, and whatever an executor throws.
std::vector<OpCheck> check_backend(Backend& be, Backend& oracle, std::string_view group = "");

}  // namespace qkv::ops
