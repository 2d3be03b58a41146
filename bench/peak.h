#pragma once
// The machine's peak float32 FLOP/s: a register-only FMA loop per instruction set (peak_simd.h, instantiated
// in peak_<isa>.cpp with that set's flags), run on 1..n threads, and the theoretical figure
// cores x GHz x FMA units x lanes x 2.
#include <cstdint>
#include <string>
#include <vector>
#include <xsimd/config/xsimd_arch.hpp>

namespace qkv::bench {

constexpr int kFmaChains = 12;  // independent accumulators in the loop (peak_simd.h says why 12)

// Runs `iterations` rounds of kFmaChains vector FMAs in registers and returns a value that depends on every
// accumulator (so the compiler keeps the work). FLOP done: iterations * kFmaChains * lanes<Arch>() * 2.
template <class Arch>
float fma_loop(int64_t iterations);
// Floats per vector of Arch.
template <class Arch>
int lanes();

extern template float fma_loop<xsimd::avx512f>(int64_t);
extern template float fma_loop<xsimd::fma3<xsimd::avx2>>(int64_t);
extern template float fma_loop<xsimd::sse4_1>(int64_t);
extern template int lanes<xsimd::avx512f>();
extern template int lanes<xsimd::fma3<xsimd::avx2>>();
extern template int lanes<xsimd::sse4_1>();

struct PeakRow {
  std::string isa;  // qkv's name of the instruction set ("avx512", "avx2+fma", "sse4.1")
  int lanes = 0;
  int threads = 0;
  double per_thread_gflops = 0;  // the loop alone on one thread
  double concurrent_gflops = 0;  // the loop on `threads` threads at once (lower when the machine is busy)
  double peak_gflops() const { return per_thread_gflops * threads; }  // the figure "fraction of peak" uses
};

// Measures every instruction set that both qkv and the CPU have, at 1..max_threads threads; prints the table,
// the measured clock and the theoretical figure. quick: shorter loops.
std::vector<PeakRow> measure_peak(int max_threads, bool quick);

// The measured peak (GFLOP/s) of `isa` at `threads`, from rows that measure_peak returned; 0 if absent.
double peak_of(const std::vector<PeakRow>& rows, const std::string& isa, int threads);

}  // namespace qkv::bench
