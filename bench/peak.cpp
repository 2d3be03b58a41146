// The machine's peak float32 FLOP/s (peak.h): the measured figure, the clock it ran at and the theoretical one.
#include "peak.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "bench_util.h"
#include "qkv/cpu.h"

namespace qkv::bench {
namespace {

struct PeakLoop {
  const char* isa;  // qkv's name for it
  float (*loop)(int64_t);
  int lanes;
  // FLOP per vector operation the core can issue: 2 where the set has a fused multiply-add; 1 where fma is a
  // multiply then an add. The theoretical figure uses it; the measured one does not: a chain step is a multiply
  // and an add, 2 FLOP per lane, fused or not.
  int flop_per_op;
};

// One entry per instruction set the bench was built with, best first (the order of qkv::available_isas()).
std::vector<PeakLoop> built_loops() {
  std::vector<PeakLoop> loops;
#if QKV_BENCH_PEAK_X86
  loops.push_back({"avx512", &fma_loop<xsimd::avx512f>, lanes<xsimd::avx512f>(), 2});
  loops.push_back({"avx2+fma", &fma_loop<xsimd::fma3<xsimd::avx2>>, lanes<xsimd::fma3<xsimd::avx2>>(), 2});
  loops.push_back({"sse4.1", &fma_loop<xsimd::sse4_1>, lanes<xsimd::sse4_1>(), 1});
#endif
  return loops;
}

// Iterations of p's loop that take about min_seconds of CPU time.
int64_t calibrate(const PeakLoop& p, double min_seconds) {
  for (int64_t iterations = 1 << 16;; iterations *= 4) {
    const ThreadCpuTimer t;
    keep(p.loop(iterations));
    if (t.seconds() > 0.1 * min_seconds) return int64_t(double(iterations) * min_seconds / t.seconds()) + 1;
  }
}

// GFLOP/s of the loop on one thread, per second of that thread's CPU time (so the share of the core that
// other processes took does not count); best of `trials`.
double one_thread_gflops(const PeakLoop& p, double min_seconds, int trials) {
  const int64_t iterations = calibrate(p, min_seconds);
  const double flop = double(iterations) * kFmaChains * p.lanes * 2;
  double best = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const ThreadCpuTimer t;
    keep(p.loop(iterations));
    best = std::max(best, flop / t.seconds() / 1e9);
  }
  return best;
}

// GFLOP/s of `threads` copies of the loop running at once, per second of wall time; best of `trials`.
double concurrent_gflops(const PeakLoop& p, int threads, double min_seconds, int trials) {
  const int64_t iterations = calibrate(p, min_seconds);
  const double flop = double(iterations) * kFmaChains * p.lanes * 2 * threads;
  double best = 0;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<std::thread> pool;
    const Timer t;
    for (int i = 0; i < threads; ++i) pool.emplace_back([&] { keep(p.loop(iterations)); });
    for (auto& th : pool) th.join();
    best = std::max(best, flop / t.seconds() / 1e9);
  }
  return best;
}

// The core clock while it runs this thread, from a chain of dependent register-register integer adds (one
// cycle each; add-immediate chains would not do: recent Intel cores fold them at rename), per second of
// thread CPU time; 0 where the chain cannot be written (not x86-64 with GNU inline assembly).
double measured_clock_ghz(double min_seconds) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  constexpr int kAddsPerRound = 8;
  auto chain = [](int64_t rounds) {
    uint64_t x = 0, one = 1;
    for (int64_t i = 0; i < rounds; ++i) {
      asm volatile(
          "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
          "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
          : "+r"(x)
          : "r"(one));
    }
    return x;
  };
  const int64_t rounds = int64_t(min_seconds * 3e9 / kAddsPerRound);  // ~min_seconds at 3 GHz
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const ThreadCpuTimer t;
    keep(float(chain(rounds)));
    best = std::max(best, double(rounds) * kAddsPerRound / t.seconds() / 1e9);
  }
  return best;
#else
  (void)min_seconds;
  return 0;
#endif
}

// The clock the kernel reports (/proc/cpuinfo "cpu MHz" of the first core; under a hypervisor usually the
// nominal frequency), in GHz; 0 when unknown.
double reported_clock_ghz() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("cpu MHz", 0) == 0) return std::stod(line.substr(line.find(':') + 1)) / 1e3;
  }
  return 0;
}

}  // namespace

std::vector<PeakRow> measure_peak(int max_threads, bool quick) {
  const double min_seconds = quick ? 0.05 : 0.25;
  const int trials = quick ? 1 : 3;
  const std::vector<std::string> qkv_isas = qkv::available_isas();
  std::vector<PeakRow> rows;
  const double clock = measured_clock_ghz(min_seconds), nominal = reported_clock_ghz();

  std::printf("\n== Peak float32 FLOP/s of this machine (load average %s)\n", load_average().c_str());
  std::printf("measured: a register-only loop of %d independent vector FMA chains (bench/peak_simd.h) on 1 thread,\n",
              kFmaChains);
  std::printf("  FLOP per second of that thread's CPU time (others' load does not lower it); peak(n threads) = that\n");
  std::printf("  x n, the figure \"%% of peak\" uses. 'concurrent': n copies at once, per second of wall time\n");
  std::printf("  (lower than 1-thread x n when other processes share the cores).\n");
  std::printf("theoretical: cores x GHz x 2 FMA units x lanes x 2 FLOP (sse4.1 has no FMA: x 1 FLOP per op), at the\n");
  std::printf("  kernel's reported clock %.2f GHz; the measured clock (a dependent integer add chain) is %.2f GHz.\n",
              nominal, clock);
  std::printf("%-10s %5s %7s %12s %12s %12s %12s %9s\n", "isa", "lanes", "threads", "1-thread", "peak (x n)",
              "concurrent", "theoretical", "madd/cycle");
  for (const PeakLoop& p : built_loops()) {
    if (std::find(qkv_isas.begin(), qkv_isas.end(), p.isa) == qkv_isas.end()) continue;  // CPU lacks it
    const double one = one_thread_gflops(p, min_seconds, trials);
    for (int threads = 1; threads <= max_threads; ++threads) {
      PeakRow r{p.isa, p.lanes, threads, one, concurrent_gflops(p, threads, min_seconds, trials)};
      const double theoretical = threads * nominal * 2 * p.lanes * p.flop_per_op;
      // Vector multiply-adds (chain steps) retired per cycle per core: 2 means two FMA units kept busy; without FMA,
      // a core with separate add units (AMD Zen) also comes near 2, and one whose two units do either near 1.
      const double per_cycle = clock > 0 ? one / (clock * p.lanes * 2) : 0;
      std::printf("%-10s %5d %7d %12.1f %12.1f %12.1f %12.1f %9.2f\n", p.isa, p.lanes, threads, one, r.peak_gflops(),
                  r.concurrent_gflops, theoretical, per_cycle);
      rows.push_back(r);
    }
  }
  if (rows.empty()) std::printf("(no peak loop for this CPU's instruction sets in this build)\n");
  std::printf(
      "(GFLOP/s; the theoretical column assumes 2 FMA units per core, as server Xeons since Skylake-SP have;\n");
  std::printf(
      " 'madd/cycle' = 1-thread GFLOP/s / (measured clock x lanes x 2 FLOP): vector multiply-adds per cycle, fused\n");
  std::printf("  or not, that this core shows; a multiply and an add count 2 FLOP either way)\n");
  // Machine-readable, for bench/cpu_report.py (the wasm step's fraction of peak beside native's).
  for (const PeakRow& r : rows)
    std::printf("RESULT bench=peak isa=%s lanes=%d threads=%d gflops=%.2f\n", r.isa.c_str(), r.lanes, r.threads,
                r.peak_gflops());
  return rows;
}

double peak_of(const std::vector<PeakRow>& rows, const std::string& isa, int threads) {
  for (const PeakRow& r : rows) {
    if (r.isa == isa && r.threads == threads) return r.peak_gflops();
  }
  return 0;
}

}  // namespace qkv::bench
