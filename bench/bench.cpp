// Native micro-benchmarks of the walking skeleton: gemm GFLOP/s per instruction set at the shapes the
// char-level GPT uses, and training tokens/s of nanoGPT's CPU char config, at 1 and 2 threads.
// Peers (OpenBLAS, PyTorch) join these tables in the CPU-speed work.
#include <chrono>
#include <cstdio>
#include <vector>

#include "kernels/kernels.h"
#include "qkv/qkv.h"
#include "runtime/random.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench_gemm() {
  struct Shape {
    int M, K, N;
  };
  const Shape shapes[] = {{768, 128, 512}, {768, 512, 128}, {64, 128, 128}, {1024, 1024, 1024}};
  std::printf("\n%-10s %-8s %-16s %10s\n", "isa", "threads", "M x K x N", "GFLOP/s");
  for (const auto& isa : qkv::available_isas()) {
    qkv::force_isa(isa);
    for (int threads : {1, 2}) {
      if (threads > qkv::max_threads()) continue;
      qkv::set_num_threads(threads);
      for (const Shape& s : shapes) {
        std::vector<float> A(size_t(s.M) * s.K, 0.5f), B(size_t(s.K) * s.N, 0.25f), C(size_t(s.M) * s.N);
        const double flop = 2.0 * s.M * s.K * s.N;
        int reps = 0;
        const auto t0 = std::chrono::steady_clock::now();
        do {
          qkv::kernels::gemm(false, false, s.M, s.N, s.K, 1.f, A.data(), s.K, B.data(), s.N, 0.f, C.data(), s.N);
          ++reps;
        } while (seconds_since(t0) < 0.3);
        const double gflops = flop * reps / seconds_since(t0) / 1e9;
        std::printf("%-10s %-8d %4d x %4d x %4d %10.1f\n", isa.c_str(), threads, s.M, s.K, s.N, gflops);
      }
    }
  }
  qkv::force_isa(qkv::available_isas().front());
}

void bench_train() {
  // nanoGPT's CPU char config (TOOLCHAIN.md): V 65, context 64, 4 layers, 4 heads, 128 wide, batch 12.
  qkv::LanguageModelConfig cfg{.vocab_size = 65, .context = 64, .d_model = 128, .heads = 4, .layers = 4};
  const int B = 12, T = 64;
  std::vector<int32_t> in(size_t(B) * T), tg(in.size());
  qkv::Rng rng(1);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t(rng.next_u64() % 65);
    tg[i] = int32_t(rng.next_u64() % 65);
  }
  std::printf("\n%-34s %-8s %12s %12s\n", "training step (char GPT, B12 T64)", "threads", "ms/step", "tokens/s");
  for (int threads : {1, 2}) {
    if (threads > qkv::max_threads()) continue;
    qkv::set_num_threads(threads);
    qkv::LanguageModel lm(cfg);
    for (int i = 0; i < 3; ++i) lm.train_step(in, tg, B, T);  // warm-up: plans the workspace
    int steps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    do {
      lm.train_step(in, tg, B, T);
      ++steps;
    } while (seconds_since(t0) < 2.0);
    const double s = seconds_since(t0) / steps;
    std::printf("%-34s %-8d %12.2f %12.0f\n", qkv::active_isa().c_str(), threads, s * 1e3, B * T / s);
  }
}

}  // namespace

int main() {
  std::printf("qkv %s bench; instruction sets here:", qkv::version());
  for (const auto& isa : qkv::available_isas()) std::printf(" %s", isa.c_str());
  std::printf("\n");
  bench_gemm();
  bench_train();
}
