// The backend registry: one Backend per device for the whole process, made on first use.
#include <memory>
#include <mutex>

#include "kernels/kernels.h"
#include "ops/backends.h"
#include "ops/ops.h"
#include "qkv/device.h"
#include "qkv/error.h"

namespace qkv::ops {

Backend& backend(Device device) {
  if (device == Device::CPU) {
    static const std::unique_ptr<Backend> cpu = make_cpu_backend();
    return *cpu;
  }
  // CUDA: refused with the reason before anything touches the driver's state beyond the device count.
  const std::string why = cuda_unavailable_reason();
  check(why.empty(), "device = cuda is unavailable: ", why);
  static std::once_flag once;
  static std::unique_ptr<Backend> cuda;
  std::call_once(once, [] { cuda = make_cuda_backend(); });
  return *cuda;
}

Backend& reference_backend() {
  static const std::unique_ptr<Backend> ref = make_reference_backend();
  return *ref;
}

std::vector<float> sinusoidal_table(int T, int C) {
  std::vector<float> pe(static_cast<size_t>(T) * C);
  kernels::sinusoidal_positions(pe, T, C);
  return pe;
}

Ids upload_ids(Backend& b, std::span<int32_t> dst, std::span<const int32_t> host) {
  check(dst.size() >= host.size(), "upload_ids: ", host.size(), " ids for a buffer of ", dst.size());
  if (b.device() == Device::CPU) return {host, host.data()};
  b.upload(dst.data(), host.data(), host.size_bytes());
  return {host, dst.data()};
}

}  // namespace qkv::ops
