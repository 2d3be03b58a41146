// Builds without CUDA: the registry refuses Device::CUDA before it gets here (cuda_unavailable_reason() is
// never empty in them); this definition keeps the link whole and the message the same.
#if !QKV_CUDA
#include "ops/backends.h"
#include "qkv/device.h"
#include "qkv/error.h"

namespace qkv::ops {

std::unique_ptr<Backend> make_cuda_backend() {
  throw Error(detail::cat("device = cuda is unavailable: ", cuda_unavailable_reason()));
}

}  // namespace qkv::ops
#endif
