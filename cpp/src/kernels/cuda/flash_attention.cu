// The host side of the tensor-core attention (flash_attention.cuh has the kernels and their description): the
// shared-memory opt-in, the launch shapes, the template instance per head size and precision, and the selection
// the backend calls (kernels.h: attention_*).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "kernels/cuda/flash_attention.cuh"

namespace qkv::kernels::cuda {
namespace {

// ---- host side ----

// Kernels above 48 KiB of dynamic shared memory must say so once per function (cudaFuncSetAttribute).
template <class Kernel>
void allow_smem(Kernel* kernel, size_t bytes, const char* op) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), op,
             "cudaFuncSetAttribute");
}

dim3 grid_of(int rows, const AttentionShape& s) {
  return dim3(static_cast<unsigned>((rows + kOwn - 1) / kOwn), static_cast<unsigned>(s.H), static_cast<unsigned>(s.B));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

FlashParams flash_params(const AttentionShape& s, std::initializer_list<const float*> ptrs) {
  FlashParams fp{attention_params(s), false};
  fp.vec = fp.a.hs % 4 == 0 && s.ldq % 4 == 0 && s.ldkv % 4 == 0 && s.C % 4 == 0;
  for (const float* ptr : ptrs) fp.vec = fp.vec && aligned16(ptr);
  return fp;
}

template <int D, AttentionPrecision kP>
void forward_as(float* out, float* lse, const float* q, const float* k, const float* v, const AttentionShape& s,
                const char* op) {
  // On every launch: the opt-in is the current device's, and a process may drive several (a static "once" would
  // leave the second device at the 48 KiB default). Always the same value, so threads cannot undo each other.
  allow_smem(flash_forward_kernel<D, kP>, forward_smem(D), op);
  flash_forward_kernel<D, kP>
      <<<grid_of(s.Tq, s), kThreads, forward_smem(D), stream()>>>(out, lse, q, k, v, flash_params(s, {q, k, v}));
  check_launch(op);
}

template <int D, AttentionPrecision kP>
void backward_as(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* q, const float* k,
                 const float* v, const float* out, const float* lse, const AttentionShape& s, const char* op) {
  allow_smem(flash_dq_kernel<D, kP>, dq_smem(D), op);  // every launch: forward_as says why
  allow_smem(flash_dkv_kernel<D, kP>, dkv_smem(D), op);
  const FlashParams fp = flash_params(s, {q, k, v, out, dout});
  if (s.Tq > 0) {
    flash_dq_kernel<D, kP>
        <<<grid_of(s.Tq, s), kThreads, dq_smem(D), stream()>>>(dq, scratch, dout, q, k, v, out, lse, fp);
    check_launch(op);
  }
  if (s.Tk > 0) {
    flash_dkv_kernel<D, kP>
        <<<grid_of(s.Tk, s), kThreads, dkv_smem(D), stream()>>>(dk, dv, scratch, dout, q, k, v, lse, fp);
    check_launch(op);
  }
}

// The template instance for a head size: D = hs rounded up to 32, 64, 96 or 128.
template <AttentionPrecision kP, class Fn>
void by_head_size(int hs, Fn&& fn) {
  if (hs <= 32) return fn.template operator()<32, kP>();
  if (hs <= 64) return fn.template operator()<64, kP>();
  if (hs <= 96) return fn.template operator()<96, kP>();
  return fn.template operator()<128, kP>();
}
template <class Fn>
void by_precision(int hs, AttentionPrecision precision, Fn&& fn) {
  switch (precision) {
    case AttentionPrecision::Tf32: return by_head_size<AttentionPrecision::Tf32>(hs, fn);
    case AttentionPrecision::Bf16: return by_head_size<AttentionPrecision::Bf16>(hs, fn);
    default: return by_head_size<AttentionPrecision::Fp32>(hs, fn);
  }
}

// QKV_CUDA_ATTENTION=rowwise routes the backend's attention through the FP32 row-wise kernels (A/B comparisons of
// whole training steps); read once.
bool rowwise_forced() {
  static const bool forced = [] {
    const char* e = std::getenv("QKV_CUDA_ATTENTION");
    return e && std::strcmp(e, "rowwise") == 0;
  }();
  return forced;
}

AttentionPrecision current_precision() {
  switch (matmul_precision()) {
    case MatmulPrecision::Tf32: return AttentionPrecision::Tf32;
    case MatmulPrecision::Bf16: return AttentionPrecision::Bf16;
    default: return AttentionPrecision::Fp32;
  }
}

}  // namespace

void attention_forward_flash(float* out, float* lse, const float* q, const float* k, const float* v,
                             const AttentionShape& s, AttentionPrecision precision) {
  const char* op = "attention_forward";
  check_attention_shape(op, s);
  if (s.B == 0 || s.Tq == 0) return;
  check(out && lse && q && (s.Tk == 0 || (k && v)), op, " (cuda): null device pointer");
  by_precision(s.C / s.H, precision,
               [&]<int D, AttentionPrecision kP>() { forward_as<D, kP>(out, lse, q, k, v, s, op); });
}

void attention_backward_flash(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* q,
                              const float* k, const float* v, const float* out, const float* lse,
                              const AttentionShape& s, AttentionPrecision precision) {
  const char* op = "attention_backward";
  check_attention_shape(op, s);
  if (s.B == 0 || (s.Tq == 0 && s.Tk == 0)) return;
  check(dq && dk && dv && scratch && dout && q && k && v && out && lse, op, " (cuda): null device pointer");
  by_precision(s.C / s.H, precision, [&]<int D, AttentionPrecision kP>() {
    backward_as<D, kP>(dq, dk, dv, scratch, dout, q, k, v, out, lse, s, op);
  });
}

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& s) {
  if (rowwise_forced()) return attention_forward_rowwise(out, lse, q, k, v, s);
  attention_forward_flash(out, lse, q, k, v, s, current_precision());
}

size_t attention_backward_scratch_size(const AttentionShape& s) {
  return static_cast<size_t>(s.B) * static_cast<size_t>(s.H) * static_cast<size_t>(s.Tq);
}

void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse, const AttentionShape& s) {
  if (rowwise_forced()) return attention_backward_rowwise(dq, dk, dv, scratch, dout, q, k, v, out, lse, s);
  attention_backward_flash(dq, dk, dv, scratch, dout, q, k, v, out, lse, s, current_precision());
}

}  // namespace qkv::kernels::cuda
