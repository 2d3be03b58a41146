#include "kernels/cpu/isa.h"

#include <xsimd/xsimd.hpp>

#include "qkv/cpu.h"
#include "qkv/error.h"

namespace qkv {
namespace kernels {
namespace {

const char* name_of(Isa isa) {
  switch (isa) {
    case Isa::AVX512: return "avx512";
    case Isa::AVX2: return "avx2+fma";
    case Isa::SSE41: return "sse4.1";
    case Isa::NEON: return "neon";
    case Isa::Scalar: return "scalar";
  }
  return "scalar";
}

// Best first, scalar last (XNNPACK's order). Only sets that were compiled in and that the CPU has.
std::vector<Isa> detect() {
  std::vector<Isa> out;
  [[maybe_unused]] const auto cpu = xsimd::available_architectures();
#if QKV_ISA_AVX512
  if (cpu.avx512f && cpu.avx512dq) out.push_back(Isa::AVX512);
#endif
#if QKV_ISA_AVX2
  if (cpu.fma3_avx2) out.push_back(Isa::AVX2);
#endif
#if QKV_ISA_SSE41
#ifdef __EMSCRIPTEN__
  out.push_back(Isa::SSE41);  // SIMD128 is required by the .wasm itself
#else
  if (cpu.sse4_1) out.push_back(Isa::SSE41);
#endif
#endif
#if QKV_ISA_NEON
  out.push_back(Isa::NEON);
#endif
  out.push_back(Isa::Scalar);
  return out;
}

const std::vector<Isa>& available() {
  static const std::vector<Isa> isas = detect();
  return isas;
}

Isa g_active = available().front();

}  // namespace

Isa active_isa() { return g_active; }

}  // namespace kernels

std::vector<std::string> available_isas() {
  std::vector<std::string> names;
  for (auto isa : kernels::available()) names.emplace_back(kernels::name_of(isa));
  return names;
}

std::string active_isa() { return kernels::name_of(kernels::g_active); }

void force_isa(const std::string& name) {
  for (auto isa : kernels::available()) {
    if (name == kernels::name_of(isa)) {
      kernels::g_active = isa;
      return;
    }
  }
  std::string names;
  for (const auto& n : available_isas()) names += (names.empty() ? "" : ", ") + n;
  throw Error("isa = \"" + name + "\" is not available here: expected one of " + names);
}

}  // namespace qkv
