// gemm GFLOP/s: qkv::kernels::gemm against OpenBLAS's cblas_sgemm in the same process, at the square and
// char-GPT shapes and the transposed products the layers run, with the fraction of the machine's peak and
// the 1 -> n thread scaling. Shapes are M x K x N: op(A) is (M,K), op(B) (K,N), C (M,N).
// gemm-quant: the decode-shaped products with quantized weights (kernels::gemm_quant), GB/s of weights read
// against the streaming read bandwidth of the same threads; and one prefill product (32 rows) per format.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "kernels/kernels.h"
#include "openblas_peer.h"
#include "ops/weight_quantize.h"
#include "peak.h"
#include "qkv/qkv.h"
#include "qkv/thread_pool.h"
#include "runtime/random.h"

namespace qkv::bench {
namespace {

struct GemmCase {
  bool trans_a, trans_b;
  int M, K, N;
  float beta;       // 1 where the layer accumulates into C (weight gradients)
  const char* use;  // where the model runs this product (char GPT: B*T = 768 rows, C 128, 4C 512, V 65)
  double target;    // the qkv/OpenBLAS ratio to reach; 0: none set
};

// The shapes (targets: >= 0.9x OpenBLAS on the large ones, >= 1.2x on the small one).
const GemmCase kShapes[] = {
    {false, false, 1024, 1024, 1024, 0.f, "square", 0.9},
    {false, false, 768, 128, 512, 0.f, "char GPT fc2 dx = dy W", 0.9},
    {false, false, 768, 512, 128, 0.f, "char GPT fc1 dx = dy W", 0.9},
    {false, false, 64, 128, 128, 0.f, "small: 64 rows x C x C", 1.2},
};

// nn/linear.cpp: forward y = x W^T is gemm(false, true); the weight gradient dW += dy^T x is gemm(true, false).
const GemmCase kLayerShapes[] = {
    {false, true, 768, 128, 128, 0.f, "linear fwd: attention q", 0},
    {false, true, 768, 128, 256, 0.f, "linear fwd: attention k,v", 0},
    {false, true, 768, 128, 512, 0.f, "linear fwd: fc1", 0},
    {false, true, 768, 512, 128, 0.f, "linear fwd: fc2", 0},
    {false, true, 768, 128, 65, 0.f, "linear fwd: tied LM head", 0},
    {true, false, 128, 768, 128, 1.f, "weight grad: attention q", 0},
    {true, false, 256, 768, 128, 1.f, "weight grad: attention k,v", 0},
    {true, false, 512, 768, 128, 1.f, "weight grad: fc1", 0},
    {true, false, 128, 768, 512, 1.f, "weight grad: fc2", 0},
    {true, false, 65, 768, 128, 1.f, "weight grad: LM head", 0},
};

// GPT-2 124M's LoRA training step (issue 37: batch 8 x 128 = 1024 rows, C 768, 4C 3072): the stack's forward
// products x W^T and, the base being frozen, its backward's dx = dy W only.
const GemmCase kGpt2Shapes[] = {
    {false, true, 1024, 768, 2304, 0.f, "GPT-2 fwd: attention qkv", 0},
    {false, true, 1024, 768, 3072, 0.f, "GPT-2 fwd: fc", 0},
    {false, true, 1024, 3072, 768, 0.f, "GPT-2 fwd: proj", 0},
    {false, false, 1024, 2304, 768, 0.f, "GPT-2 dx: attention qkv", 0},
    {false, false, 1024, 3072, 768, 0.f, "GPT-2 dx: fc", 0},
    {false, false, 1024, 768, 3072, 0.f, "GPT-2 dx: proj", 0},
};

const char* op_name(const GemmCase& c) { return c.trans_a ? "At*B" : c.trans_b ? "A*Bt" : "A*B"; }

// Operands of one case, stored as the layers store them, filled with fixed-seed values in [-1, 1).
struct Operands {
  const GemmCase& c;
  int lda, ldb;
  std::vector<float> A, B, C;

  explicit Operands(const GemmCase& gc) : c(gc), lda(gc.trans_a ? gc.M : gc.K), ldb(gc.trans_b ? gc.K : gc.N) {
    qkv::Rng rng(42);
    A.resize(size_t(c.M) * c.K);
    B.resize(size_t(c.K) * c.N);
    C.assign(size_t(c.M) * c.N, 0.f);
    for (float& x : A) x = float(2 * rng.uniform() - 1);
    for (float& x : B) x = float(2 * rng.uniform() - 1);
  }
  void qkv(float beta) {
    kernels::gemm(c.trans_a, c.trans_b, c.M, c.N, c.K, 1.f, A.data(), lda, B.data(), ldb, beta, C.data(), c.N);
  }
  void openblas(float beta) {
    openblas::gemm(c.trans_a, c.trans_b, c.M, c.N, c.K, 1.f, A.data(), lda, B.data(), ldb, beta, C.data(), c.N);
  }
};

struct Measured {
  double qkv = 0, openblas = 0;  // GFLOP/s, best trial
};

// Best GFLOP/s of each side over `rounds` rounds of `batches` timed batches (each >= min_seconds of calls).
// A round pauses first, so that OpenBLAS's worker threads (which spin for a while after each call) are asleep
// before qkv runs, then times qkv's batches, then OpenBLAS's. Short batches, alternated in rounds, let each side
// show its speed in the machine's quieter moments: this shared machine's speed swings up to 2x over seconds,
// and one long average per side let the swings decide the ratio (1024^3 read 0.80x-0.87x OpenBLAS across runs).
Measured measure(const GemmCase& c, int threads, int rounds, int batches, double min_seconds) {
  Operands ops(c);
  qkv::set_num_threads(threads);
  openblas::set_num_threads(threads);
  const double flop = 2.0 * c.M * c.K * c.N;
  Measured m;
  for (int round = 0; round < rounds; ++round) {
    if (openblas::available()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ops.qkv(c.beta);  // untimed first call
    m.qkv = std::max(m.qkv, flop / best_seconds_per_call([&] { ops.qkv(c.beta); }, min_seconds, batches) / 1e9);
    if (!openblas::available()) continue;
    ops.openblas(c.beta);
    m.openblas =
        std::max(m.openblas, flop / best_seconds_per_call([&] { ops.openblas(c.beta); }, min_seconds, batches) / 1e9);
  }
  return m;
}

// Largest |qkv - OpenBLAS| relative to the largest |OpenBLAS| entry (beta 0): a guard against timing a
// broken path, not a test.
double relative_difference(const GemmCase& c) {
  Operands ops(c);
  ops.openblas(0.f);
  const std::vector<float> ref = ops.C;
  ops.qkv(0.f);
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, double(std::fabs(ops.C[i] - ref[i])));
    scale = std::max(scale, double(std::fabs(ref[i])));
  }
  return diff / scale;
}

std::string shape_name(const GemmCase& c) {
  char s[40];
  std::snprintf(s, sizeof s, "%d x %d x %d", c.M, c.K, c.N);
  return s;
}

struct Row {
  const GemmCase* c;
  int threads;
  Measured m;
};

void print_table(const char* title, const std::vector<Row>& rows, const std::vector<PeakRow>& peak) {
  const bool peer = openblas::available();
  const std::string isa = qkv::active_isa();
  std::printf("\n%s\n", title);
  std::printf("%-5s %-18s %-27s %3s %8s %9s %7s %7s %8s %8s\n", "op", "M x K x N", "use", "thr", "qkv", "OpenBLAS",
              "ratio", "target", "qkv %pk", "OB %pk");
  for (const Row& r : rows) {
    const double pk = peak_of(peak, isa, r.threads);
    char ratio[16] = "-", target[16] = "-", ob[16] = "-", ob_pk[16] = "-", qkv_pk[16] = "-";
    if (peer) {
      std::snprintf(ob, sizeof ob, "%.1f", r.m.openblas);
      std::snprintf(ratio, sizeof ratio, "%.2fx", r.m.qkv / r.m.openblas);
      if (r.c->target > 0) {
        std::snprintf(target, sizeof target, ">=%.1f %s", r.c->target,
                      r.m.qkv / r.m.openblas >= r.c->target ? "ok" : "NO");
      }
      if (pk > 0) std::snprintf(ob_pk, sizeof ob_pk, "%.0f%%", 100 * r.m.openblas / pk);
    }
    if (pk > 0) std::snprintf(qkv_pk, sizeof qkv_pk, "%.0f%%", 100 * r.m.qkv / pk);
    std::printf("%-5s %-18s %-27s %3d %8.1f %9s %7s %7s %8s %8s\n", op_name(*r.c), shape_name(*r.c).c_str(), r.c->use,
                r.threads, r.m.qkv, ob, ratio, target, qkv_pk, ob_pk);
  }
}

void print_scaling(const std::vector<Row>& rows, int max_threads) {
  const bool peer = openblas::available();
  std::printf(
      "\ngemm thread scaling, 1 -> %d threads (speed-up = GFLOP/s at %d / GFLOP/s at 1; efficiency = "
      "speed-up / %d)\n",
      max_threads, max_threads, max_threads);
  std::printf("%-5s %-18s %10s %10s %9s %7s %12s %7s\n", "op", "M x K x N", "qkv 1 thr", "qkv n thr", "speed-up",
              "eff.", "OB speed-up", "OB eff.");
  for (const Row& one : rows) {
    if (one.threads != 1) continue;
    for (const Row& n : rows) {
      if (n.c != one.c || n.threads != max_threads) continue;
      const double s = n.m.qkv / one.m.qkv;
      char ob_s[16] = "-", ob_e[16] = "-";
      if (peer) {
        std::snprintf(ob_s, sizeof ob_s, "%.2fx", n.m.openblas / one.m.openblas);
        std::snprintf(ob_e, sizeof ob_e, "%.0f%%", 100 * n.m.openblas / one.m.openblas / max_threads);
      }
      std::printf("%-5s %-18s %10.1f %10.1f %8.2fx %6.0f%% %12s %7s\n", op_name(*one.c), shape_name(*one.c).c_str(),
                  one.m.qkv, n.m.qkv, s, 100 * s / max_threads, ob_s, ob_e);
    }
  }
}

// The GPT-2 head's products as LanguageModel's training head runs them (models/language_model.cpp: head_loss): a chunk
// of 64 rows of x (C = 768) against the whole (V = 50257, C) weight in blocks of 2048 vocabulary rows, forward
// z[:, block] = x W[block]^T (the last block first), then dx = sum over the blocks of dz[:, block] W[block]. The weight
// (154 MB) comes from memory once per pass, as in the step; GFLOP/s of each pass (2 x 64 x C x V FLOP), best of
// `rounds`.
struct HeadMeasured {
  Measured forward, backward;
};
HeadMeasured measure_head(int threads, int rounds) {
  constexpr int V = 50257, C = 768, rows = 64, block = 2048;
  qkv::Rng rng(7);
  std::vector<float> W(size_t(V) * C), x(size_t(rows) * C), z(size_t(rows) * V), dx(size_t(rows) * C);
  for (float& w : W) w = float(0.04 * rng.uniform() - 0.02);
  for (float& a : x) a = float(2 * rng.uniform() - 1);
  for (float& a : z) a = float(1e-4 * rng.uniform());
  using Gemm = void (*)(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  auto forward = [&](Gemm gemm) {  // backwards over the blocks, as head_loss walks them
    for (int v0 = (V - 1) / block * block; v0 >= 0; v0 -= block)
      gemm(false, true, rows, std::min(block, V - v0), C, 1.f, x.data(), C, W.data() + size_t(v0) * C, C, 0.f,
           z.data() + v0, V);
  };
  auto backward = [&](Gemm gemm) {
    for (int v0 = 0; v0 < V; v0 += block)
      gemm(false, false, rows, C, std::min(block, V - v0), 1.f, z.data() + v0, V, W.data() + size_t(v0) * C, C,
           v0 == 0 ? 0.f : 1.f, dx.data(), C);
  };
  qkv::set_num_threads(threads);
  openblas::set_num_threads(threads);
  const double flop = 2.0 * rows * C * V;
  HeadMeasured m;
  auto best = [&](auto&& pass, Gemm gemm) {
    pass(gemm);  // untimed first pass
    return flop / best_seconds_per_call([&] { pass(gemm); }, 0.0, 3) / 1e9;
  };
  for (int round = 0; round < rounds; ++round) {
    m.forward.qkv = std::max(m.forward.qkv, best(forward, &kernels::gemm));
    m.backward.qkv = std::max(m.backward.qkv, best(backward, &kernels::gemm));
    if (!openblas::available()) continue;
    m.forward.openblas = std::max(m.forward.openblas, best(forward, &openblas::gemm));
    m.backward.openblas = std::max(m.backward.openblas, best(backward, &openblas::gemm));
  }
  return m;
}

}  // namespace

int run_peak(const Options& o) {
  measure_peak(o.threads, o.quick);
  return 0;
}

int run_gemm(const Options& o) {
  const int rounds = o.quick ? 1 : 3, batches = o.quick ? 1 : 10;
  const double min_seconds = o.quick ? 0.03 : 0.015;
  const std::vector<PeakRow> peak = measure_peak(o.threads, o.quick);

  std::printf("\n== gemm: qkv (%s) %s %s\n", qkv::active_isa().c_str(),
              openblas::available() ? "vs" : "alone:", openblas::describe().c_str());
  if (openblas::available()) {
    double worst = 0;
    const GemmCase* worst_case = &kShapes[0];
    for (const auto cases : {std::span<const GemmCase>(kShapes), std::span<const GemmCase>(kLayerShapes)}) {
      for (const GemmCase& c : cases) {
        const double d = relative_difference(c);
        if (d >= worst) {
          worst = d;
          worst_case = &c;
        }
      }
    }
    std::printf("results %s: largest max|qkv - OpenBLAS| / max|OpenBLAS| over the cases = %.1e (%s %s)\n",
                worst < 1e-4 ? "agree" : "DIFFER", worst, op_name(*worst_case), shape_name(*worst_case).c_str());
  }
  std::printf(
      "GFLOP/s = 2 M K N / seconds (wall); the best batch of calls (each batch >= %.3f s) over %d rounds of %d\n"
      "batches per side, a round being qkv's batches then OpenBLAS's, with the same threads\n"
      "(qkv::set_num_threads, openblas_set_num_threads). ratio = qkv / OpenBLAS; %%pk = share of the measured\n"
      "peak at that thread count (%s loop, 1-thread figure x threads). load average: %s\n",
      min_seconds, rounds, batches, qkv::active_isa().c_str(), load_average().c_str());

  std::vector<Row> shapes, layers;
  for (int threads = 1; threads <= o.threads; ++threads) {
    for (const GemmCase& c : kShapes)
      shapes.push_back({&c, threads, measure(c, threads, rounds, batches, min_seconds)});
  }
  print_table("gemm at the issue's shapes (GFLOP/s)", shapes, peak);
  for (int threads = 1; threads <= o.threads; ++threads) {
    for (const GemmCase& c : kLayerShapes)
      layers.push_back({&c, threads, measure(c, threads, rounds, batches, min_seconds)});
  }
  print_table("gemm, the transposed products of the char GPT's layers (GFLOP/s; At*B accumulates, beta = 1)", layers,
              peak);
  std::vector<Row> gpt2;
  for (int threads = 1; threads <= o.threads; ++threads) {
    for (const GemmCase& c : kGpt2Shapes)
      gpt2.push_back({&c, threads, measure(c, threads, rounds, batches, min_seconds)});
  }
  print_table("gemm, GPT-2 124M's LoRA step (1024 rows; the frozen base's backward computes dx only) (GFLOP/s)", gpt2,
              peak);
  // The head's two passes per 64-row chunk (measure_head), as rows of the same table.
  static const GemmCase head_forward{false, true, 64, 768, 50257, 0.f, "GPT-2 head fwd, 64-row chunk", 0};
  static const GemmCase head_backward{false, false, 64, 50257, 768, 0.f, "GPT-2 head dx, 64-row chunk", 0};
  std::vector<Row> head;
  for (int threads = 1; threads <= o.threads; ++threads) {
    const HeadMeasured h = measure_head(threads, o.quick ? 1 : 3);
    head.push_back({&head_forward, threads, h.forward});
    head.push_back({&head_backward, threads, h.backward});
  }
  print_table(
      "gemm, the GPT-2 head's products per 64-row chunk against its (50257, 768) weight, 2048 vocabulary rows a call\n"
      "(the weight, 154 MB, read from memory in each pass as in the training step) (GFLOP/s)",
      head, peak);
  std::printf("load average after: %s\n", load_average().c_str());

  if (o.threads >= 2) {
    std::vector<Row> all = shapes;
    all.insert(all.end(), layers.begin(), layers.end());
    print_scaling(all, o.threads);
  }
  return 0;
}

int run_gemm_isas(const Options& o) {
  std::printf("\n== gemm per instruction set, forced (GFLOP/s, best of %d)\n", o.quick ? 1 : 3);
  std::printf("%-10s %-8s %-18s %10s\n", "isa", "threads", "M x K x N", "GFLOP/s");
  for (const std::string& isa : qkv::available_isas()) {
    qkv::force_isa(isa);
    for (int threads = 1; threads <= o.threads; ++threads) {
      for (const GemmCase& c : kShapes) {
        Operands ops(c);
        qkv::set_num_threads(threads);
        const double s = best_seconds_per_call([&] { ops.qkv(0.f); }, o.quick ? 0.03 : 0.1, o.quick ? 1 : 3);
        std::printf("%-10s %-8d %-18s %10.1f\n", isa.c_str(), threads, shape_name(c).c_str(),
                    2.0 * c.M * c.K * c.N / s / 1e9);
      }
    }
  }
  qkv::force_isa(qkv::available_isas().front());
  return 0;
}

// ---- the product with quantized weights: decode-shaped matrix-vector products ----

namespace {

// 64-byte aligned storage, as the models' tensors are (host_allocate): W's rows then start on cache lines (every
// row stride of the GPT-2 shapes is a multiple of 64 bytes), where an unaligned 64-byte load would split two.
template <class T>
struct Align64 {
  using value_type = T;
  Align64() = default;
  template <class U>
  Align64(const Align64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const Align64&) const { return true; }
};
template <class T>
using Aligned = std::vector<T, Align64<T>>;

// Bytes the product must read: W packed (or fp32) and its scales.
size_t weight_bytes(ops::WeightFormat f, int N, int K) {
  if (f == ops::WeightFormat::F32) return size_t(N) * K * sizeof(float);
  return ops::packed_bytes(f, N, K) + size_t(N) * ops::scales_per_row(f, K) * sizeof(float);
}

// The streaming read bandwidth of `threads` threads over a 512 MiB buffer (an XOR of 64-bit words: the compiler
// vectorizes it, and it does nothing else), best of a few passes, in GB/s.
double stream_read_gbps(int threads, bool quick) {
  const size_t words = (quick ? size_t{64} : size_t{512}) << 17;  // 64 or 512 MiB
  std::vector<uint64_t> buf(words);
  for (size_t i = 0; i < words; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  qkv::set_num_threads(threads);
  std::vector<uint64_t> part(size_t(threads) * 8);
  const double s = best_seconds_per_call(
      [&] {
        qkv::parallel_for(threads, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            const size_t a = words * size_t(t) / threads, b = words * size_t(t + 1) / threads;
            uint64_t x = 0;
            for (size_t i = a; i < b; ++i) x ^= buf[i];
            part[size_t(t) * 8] = x;
          }
        });
      },
      quick ? 0.05 : 0.3, 3);
  keep(float(part[0] & 1));
  return double(words * sizeof(uint64_t)) / s / 1e9;
}

// W (N, K) in format f as the product reads it: packed with its scales (nothing for F32, which reads W itself).
struct PackedWeight {
  Aligned<uint8_t> bytes;
  Aligned<float> scales;
};
PackedWeight pack(ops::WeightFormat f, const Aligned<float>& w, int N, int K) {
  PackedWeight p;
  if (f == ops::WeightFormat::F32) return p;
  p.bytes.resize(ops::packed_bytes(f, N, K));
  p.scales.resize(size_t(N) * ops::scales_per_row(f, K) + 1);
  ops::quantize_rows(f, w.data(), N, K, p.bytes.data(), p.scales.data());
  return p;
}

// y (M, N) = x (M, K) W^T, by the fp32 gemm or the quantized product; a8: with int8 activations (int8 and q4 only).
void product(ops::WeightFormat f, int M, int N, int K, const float* x, const Aligned<float>& w, const PackedWeight& p,
             float* y, bool a8 = false) {
  if (f == ops::WeightFormat::F32)
    kernels::gemm(false, true, M, N, K, 1.f, x, K, w.data(), K, 0.f, y, N);
  else
    kernels::gemm_quant(M, N, K, x, K, f, p.bytes.data(), p.scales.data(), y, N, a8);
}

}  // namespace

int run_gemm_quant(const Options& o) {
  if (!o.isa.empty()) qkv::force_isa(o.isa);
  struct Shape {
    int N, K;
    const char* use;
  };
  const Shape shapes[] = {{768, 768, "GPT-2 attn out"},
                          {2304, 768, "GPT-2 qkv in_proj"},
                          {3072, 768, "GPT-2 fc1"},
                          {768, 3072, "GPT-2 fc2"},
                          {50257, 768, "GPT-2 tied head"}};
  const ops::WeightFormat formats[] = {ops::WeightFormat::F32, ops::WeightFormat::F16, ops::WeightFormat::BF16,
                                       ops::WeightFormat::Int8, ops::WeightFormat::Q4};
  // The decode table's sides: each format with fp32 activations, then int8 and q4 with int8 activations (a8: int8a8,
  // q4a8, the integer dot-product kernels).
  struct DecodeSide {
    ops::WeightFormat f;
    bool a8;
  };
  const DecodeSide decode_sides[] = {{ops::WeightFormat::F32, false},  {ops::WeightFormat::F16, false},
                                     {ops::WeightFormat::BF16, false}, {ops::WeightFormat::Int8, false},
                                     {ops::WeightFormat::Q4, false},   {ops::WeightFormat::Int8, true},
                                     {ops::WeightFormat::Q4, true}};
  const int rounds = o.quick ? 1 : 3;
  const double min_seconds = o.quick ? 0.02 : 0.1;
  std::printf("\n== gemm_quant: decode (M = 1) products y = x W^T, qkv (%s); load average: %s\n",
              qkv::active_isa().c_str(), load_average().c_str());
  std::printf(
      "GB/s = bytes of W and its scales / seconds per call (best of %d batches >= %.2f s); %%stream = share of the\n"
      "streaming read bandwidth of the same threads (an XOR over 512 MiB). f32 is qkv's fp32 gemm (its row kernel).\n",
      rounds, min_seconds);
  std::vector<double> stream(size_t(o.threads) + 1);
  for (int t = 1; t <= o.threads; ++t) {
    stream[size_t(t)] = stream_read_gbps(t, o.quick);
    std::printf("streaming read, %d thread%s: %.1f GB/s\n", t, t > 1 ? "s" : "", stream[size_t(t)]);
  }
  std::printf("%-18s %-14s %3s %6s %10s %9s %8s %8s\n", "use", "N x K", "thr", "format", "MB read", "us/call", "GB/s",
              "%stream");
  qkv::Rng rng(3);
  for (const Shape& sh : shapes) {
    Aligned<float> w(size_t(sh.N) * sh.K), x(size_t(sh.K)), y(size_t(sh.N));
    for (float& v : w) v = float(rng.normal() * 0.02);
    for (float& v : x) v = float(rng.normal());
    for (const auto& [f, a8] : decode_sides) {
      const PackedWeight packed = pack(f, w, sh.N, sh.K);
      const auto call = [&] { product(f, 1, sh.N, sh.K, x.data(), w, packed, y.data(), a8); };
      for (int t = 1; t <= o.threads; ++t) {
        qkv::set_num_threads(t);
        call();
        const double s = best_seconds_per_call(call, min_seconds, rounds);
        const double bytes = double(weight_bytes(f, sh.N, sh.K)), gbps = bytes / s / 1e9;
        char shape[24];
        std::snprintf(shape, sizeof shape, "%d x %d", sh.N, sh.K);
        const std::string name = std::string(ops::format_name(f)) + (a8 ? "a8" : "");
        std::printf("%-18s %-14s %3d %6s %10.1f %9.1f %8.1f %7.0f%%\n", sh.use, shape, t, name.c_str(), bytes / 1e6,
                    s * 1e6, gbps, 100 * gbps / stream[size_t(t)]);
      }
    }
  }

  // Many rows at once go through the dequantized panels and the fp32 gemm (GFLOP/s): a prompt's 32 rows, and a
  // LoRA step's 1024 (8 x 128) through the down-projection, whose 1024 x 3072 activations are the largest A.
  struct Rows {
    int M, N, K;
    const char* use;
  };
  for (const Rows& r : {Rows{32, 3072, 768, "prefill, fc1"}, Rows{1024, 768, 3072, "LoRA step, fc2"}}) {
    const int M = r.M, N = r.N, K = r.K;
    std::printf("\n%s: M = %d rows, %d x %d (GFLOP/s = 2 M N K / seconds)\n", r.use, M, N, K);
    std::printf("%3s %6s %9s %9s\n", "thr", "format", "us/call", "GFLOP/s");
    Aligned<float> w(size_t(N) * K), x(size_t(M) * K), y(size_t(M) * N);
    for (float& v : w) v = float(rng.normal() * 0.02);
    for (float& v : x) v = float(rng.normal());
    for (ops::WeightFormat f : formats) {
      const PackedWeight packed = pack(f, w, N, K);
      const auto call = [&] { product(f, M, N, K, x.data(), w, packed, y.data()); };
      for (int t = 1; t <= o.threads; ++t) {
        qkv::set_num_threads(t);
        call();
        const double s = best_seconds_per_call(call, min_seconds, rounds);
        std::printf("%3d %6s %9.1f %9.1f\n", t, ops::format_name(f), s * 1e6, 2.0 * M * N * K / s / 1e9);
      }
    }
  }
  return 0;
}

}  // namespace qkv::bench
