// The backend registry: one Backend per device for the whole process, made on first use.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "kernels/kernels.h"
#include "ops/backends.h"
#include "ops/clip.h"
#include "ops/ops.h"
#include "qkv/device.h"
#include "qkv/error.h"

namespace qkv::ops {

namespace {

std::atomic<bool> cpu_reference{false};
std::atomic<Backend*> cpu_override{nullptr};

}  // namespace

bool set_cpu_reference(bool on) { return cpu_reference.exchange(on); }
Backend* set_cpu_backend_for_tests(Backend* b) { return cpu_override.exchange(b); }

void Backend::linear_forward(Span a, Span h, CSpan x, CSpan w, CSpan b, Act act, int rows, int in, int out) {
  gemm(false, true, rows, out, in, 1.f, x.data(), in, w.data(), in, 0.f, h.data(), out);
  if (!b.empty() || act != Act::Identity || a.data() != h.data()) bias_act_forward(a, h, b, act, rows, out);
}

void Backend::linear_quant_forward(Span a, Span h, const float* x, int format, const uint8_t* W, const float* scales,
                                   CSpan b, Act act, int rows, int in, int out, bool int8_act) {
  gemm_quant(rows, out, in, x, in, format, W, scales, h.data(), out, int8_act);
  if (!b.empty() || act != Act::Identity || a.data() != h.data()) bias_act_forward(a, h, b, act, rows, out);
}

size_t Backend::clipped_adam_scratch_size(size_t ranges) const {
  return std::max(sum_squares_scratch_size(), adam_scratch_size(ranges));
}

std::optional<std::array<double, 2>> Backend::clipped_adam_step(Span p, Span m, Span v, CSpan g, CSpan g_all,
                                                                CSpan gate, std::span<const AdamRange> ranges,
                                                                const AdamPlan& plan, float max_norm, Span scratch) {
  check(scratch.size() >= clipped_adam_scratch_size(ranges.size()), "adam_step (", name(), "): scratch of ",
        scratch.size(), " floats: expected clipped_adam_scratch_size(", ranges.size(), ")");
  // Deciding on the host, this backend's steps are read before the next is queued: nothing is ever ahead.
  check(plan.ahead == 0, "adam_step (", name(), "): a step queued behind ", plan.ahead,
        " undecided ones, on a backend that decides on the host");
  const AdamHyper& h = plan.hyper[0];
  const Span sum_scratch = scratch.first(sum_squares_scratch_size());
  const std::array<double, 2> sums{sum_squares(g_all, sum_scratch),
                                   gate.empty() ? 0.0 : sum_squares(gate, sum_scratch)};
  if (!std::isfinite(sums[0]) || !std::isfinite(sums[1])) return sums;
  AdamHyper clipped = h;
  clipped.grad_scale = clip_factor(sums[0], max_norm);
  adam_step(p, m, v, g, ranges, clipped, scratch.first(adam_scratch_size(ranges.size())));
  return sums;
}

std::array<double, 2> Backend::clipped_adam_sums(Span) {
  throw Error(detail::cat("clipped_adam_sums (", name(), "): this backend's clipped_adam_step returns its sums"));
}
CSpan Backend::clipped_adam_sums_span(CSpan) const {
  throw Error(detail::cat("clipped_adam_sums_span (", name(), "): this backend's clipped_adam_step returns its sums"));
}

uint64_t Backend::read_later(std::span<const CSpan> parts) {
  size_t n = 0;
  for (CSpan part : parts) n += part.size();
  std::vector<float> host(n);
  size_t at = 0;
  for (CSpan part : parts) {
    download(host.data() + at, part.data(), part.size_bytes());
    at += part.size();
  }
  const std::lock_guard<std::mutex> lock(reads_mutex_);
  reads_.emplace(next_read_, std::move(host));
  return next_read_++;
}

void Backend::take(uint64_t id, std::span<float> dst) {
  std::vector<float> host;
  {
    const std::lock_guard<std::mutex> lock(reads_mutex_);
    const auto it = reads_.find(id);
    check(it != reads_.end(), "take (", name(), "): read ", id, " was never queued or was taken already");
    host = std::move(it->second);
    reads_.erase(it);
  }
  check(host.size() == dst.size(), "take (", name(), "): read ", id, " holds ", host.size(), " floats, not ",
        dst.size());
  std::copy(host.begin(), host.end(), dst.begin());
}

void Backend::begin_step(uint64_t) {}
void Backend::end_step() {}
bool Backend::cancel_step() noexcept { return false; }

Backend& backend(Device device) {
  if (device == Device::CPU) {
    if (cpu_reference) return reference_backend();
    if (Backend* b = cpu_override.load()) return *b;
    static const std::unique_ptr<Backend> cpu = make_cpu_backend();
    return *cpu;
  }
  if (device == Device::WebGPU) return webgpu_backend();
  // CUDA: asked of the driver once. Refused with the reason where there is no GPU (or no CUDA in this build);
  // a failed start (make_cuda_backend threw) is tried again by the next call.
  static std::once_flag once;
  static std::unique_ptr<Backend> cuda;
  static std::string why;
  std::call_once(once, [] {
    why = cuda_unavailable_reason();
    if (why.empty()) cuda = make_cuda_backend();
  });
  check(cuda != nullptr, "device = cuda is unavailable: ", why);
  return *cuda;
}

// Zeroed, 64-byte aligned host memory. calloc rather than aligned_alloc + memset: a large block comes from fresh
// pages that the kernel maps already zeroed, and calloc knows not to clear them again, so a checkpoint read
// into new weights touches each page once (the memset took a third of load_file's time). calloc aligns to 16
// bytes only: the block is over-allocated by 64 and the pointer calloc gave is kept just below the aligned one,
// for host_free.
void* host_allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  constexpr size_t kAlign = 64;
  // On wasm32 size_t is 32 bits: a request near its top would wrap when padded.
  check(bytes <= std::numeric_limits<size_t>::max() - 2 * kAlign, "out of memory: ", bytes,
        " bytes do not fit in this build's address space (", sizeof(size_t) * 8, "-bit)");
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* base = std::calloc(1, rounded + kAlign);
#if defined(__EMSCRIPTEN__)
  // In the wasm core the limit is the module's address space, not the machine: say how far the heap has grown
  // and what would fit, so a model too big for the browser is told apart from a machine short of memory.
  const uint64_t heap = static_cast<uint64_t>(__builtin_wasm_memory_size(0)) * 65536;
  check(base != nullptr, "out of memory: could not allocate ", rounded, " bytes (the wasm core's heap holds ", heap,
        " bytes and can grow to at most 4 GiB, 4294967296 bytes, what a wasm32 module addresses; a model quantized "
        "to int8 or q4 needs 4 to 6 times less: qkv quantize, model.quantize)");
#else
  check(base != nullptr, "out of memory: could not allocate ", rounded, " bytes");
#endif
  // The first 64-byte boundary past base + sizeof(void*): room for the stored pointer, and within the padding.
  const auto at = (reinterpret_cast<uintptr_t>(base) + sizeof(void*) + kAlign - 1) / kAlign * kAlign;
  void* p = reinterpret_cast<void*>(at);
  static_cast<void**>(p)[-1] = base;
#if defined(__linux__)
  // Large blocks (weights, moments, the workspace) on transparent huge pages where the system allows them on
  // request: a 500 MB checkpoint read into fresh weights otherwise takes 120,000 page faults, most of its time.
  constexpr size_t kHuge = size_t{2} << 20;
  if (rounded >= 2 * kHuge) {
    const uintptr_t from = (at + kHuge - 1) / kHuge * kHuge, to = (at + rounded) / kHuge * kHuge;
    if (to > from) ::madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);  // advice: failure is harmless
  }
#endif
  return p;
}

void host_free(void* p) noexcept {
  if (p != nullptr) std::free(static_cast<void**>(p)[-1]);
}

Backend& reference_backend() {
  static const std::unique_ptr<Backend> ref = make_reference_backend();
  return *ref;
}

std::vector<float> sinusoidal_table(int T, int C) {
  // The host's copy of the table (context x d_model floats), refused as the parameters' allocations are, naming
  // its size, rather than a std::bad_alloc for a mistyped context.
  std::vector<float> pe;
  try {
    pe.resize(static_cast<size_t>(T) * C);
  } catch (const std::bad_alloc&) {
    throw Error(detail::cat("out of memory: could not allocate ", static_cast<size_t>(T) * C * sizeof(float),
                            " bytes for the sinusoidal position table (context ", T, " x d_model ", C, ")"));
  }
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
