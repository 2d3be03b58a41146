#pragma once
// Where a layer keeps what its backward reads (its "saved" activations): its own buffers in the workspace, or,
// under activation recomputation (EncoderStack::plan with recompute), buffers that every layer of the stack shares
// by role. A recomputing stack keeps each layer's input only and re-runs the layer's forward right before its
// backward, so at any time the shared buffers hold one layer's internals: the arena holds one layer's activations
// instead of L layers'. Scratch that lives inside one call (Workspace::take_shared) is unaffected.
#include <string>
#include <string_view>

#include "qkv/workspace.h"

namespace qkv::nn {

struct Saved {
  std::string key;  // empty: the layer's own buffers; else the shared buffers' key prefix

  bool shared() const { return !key.empty(); }
  // n floats for `role`.
  Span take(Workspace& ws, std::string_view role, size_t n) const {
    return shared() ? ws.take_shared(key + std::string(role), n) : ws.take(n);
  }
  // The same choice for a part of the layer (its attention, its feed-forward, ...), named by `part`.
  Saved operator/(std::string_view part) const { return shared() ? Saved{key + std::string(part) + "."} : Saved{}; }
};

}  // namespace qkv::nn
