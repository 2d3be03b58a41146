// Data-parallel training speed (issue 23): run under `mpirun -np N` (or alone for N = 1), one thread per rank.
// Each rank trains its rows of a global batch of random tokens, the gradients summed in buckets during the
// backward (parallel/data_parallel.h). Timed twice: with the overlap (buckets start as the backward finishes them)
// and without (every bucket summed after the backward, blocking), so that
//   comm per step       = the blocking sum's time per step (overlap off),
//   exposed per step    = the time the step spent in communication calls with the overlap on,
//   overlap             = 1 - exposed / comm.
// Rank 0 prints one RESULT line per mode. bench/run_dist.sh runs 1 and 2 ranks and prints the table.
//
//   mpirun -np 2 build/mpi/bench/qkv_dist_bench --model char-gpt|seq2seq|seq2seq-tutorial [--batch G]
//                                              [--steps S] [--warmup W] [--bucket-mb M]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "parallel/data_parallel.h"
#include "parallel/mpi.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "qkv/thread_pool.h"
#include "runtime/random.h"

using namespace qkv;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model = "char-gpt";
  int batch = 0, steps = 20, warmup = 3;
  double bucket_mb = 1.0;
};

std::vector<int32_t> ids(size_t n, int V, Rng& rng, int low = 0) {
  std::vector<int32_t> v(n);
  for (auto& t : v) t = low + static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V - low));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      a.model = v;
    else if (k == "--batch")
      a.batch = std::atoi(v.c_str());
    else if (k == "--steps")
      a.steps = std::atoi(v.c_str());
    else if (k == "--warmup")
      a.warmup = std::atoi(v.c_str());
    else if (k == "--bucket-mb")
      a.bucket_mb = std::atof(v.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  dist::MpiSession mpi;
  if (!mpi.active()) {
    std::fprintf(stderr, "run me under mpirun (mpirun -np 1 for one rank)\n");
    return 2;
  }
  set_num_threads(1);
  const auto comm = dist::mpi_world();
  const int N = comm->size();
  Rng rng(42);  // the same batch on every rank; each takes its rows

  std::unique_ptr<LanguageModel> lm;
  std::unique_ptr<Seq2Seq> s2s;
  std::vector<int32_t> x, y, z;
  int rows = 0, S = 0, T = 0;
  long long tokens_per_step = 0;
  size_t params = 0;
  if (a.model == "char-gpt") {
    // nanoGPT's CPU char config (TOOLCHAIN.md), global batch 12 x 64 by default.
    const int G = a.batch > 0 ? a.batch : 12;
    T = 64;
    LanguageModelConfig c{.vocab_size = 65, .context = T, .d_model = 128, .heads = 4, .layers = 4};
    c.bias = false;
    lm = std::make_unique<LanguageModel>(c);
    rows = G / N;
    x = ids(static_cast<size_t>(rows) * T, 65, rng);
    y = ids(x.size(), 65, rng);
    tokens_per_step = static_cast<long long>(G) * T;
    params = lm->num_parameters();
  } else if (a.model == "seq2seq" || a.model == "seq2seq-tutorial") {
    const bool tutorial = a.model == "seq2seq-tutorial";
    // seq2seq: the qkv tool's small preset (d 128, 3+3 layers, d_ff 512), source and target 32 tokens, global
    // batch 32; seq2seq-tutorial: DESIGN.md's tutorial shape (d 512, 6+6, d_ff 2048, vocab 5000), batch 8.
    const int G = a.batch > 0 ? a.batch : tutorial ? 8 : 32;
    S = T = 32;
    Seq2SeqConfig c;
    c.src_vocab = c.tgt_vocab = tutorial ? 5000 : 64;
    c.context = 100;
    c.d_model = tutorial ? 512 : 128;
    c.heads = tutorial ? 8 : 4;
    c.encoder_layers = c.decoder_layers = tutorial ? 6 : 3;
    c.d_ff = tutorial ? 2048 : 512;
    s2s = std::make_unique<Seq2Seq>(c);
    rows = G / N;
    x = ids(static_cast<size_t>(rows) * S, c.src_vocab, rng, 1);
    y = ids(static_cast<size_t>(rows) * T, c.tgt_vocab, rng, 1);
    z = ids(y.size(), c.tgt_vocab, rng, 1);
    tokens_per_step = static_cast<long long>(G) * (S + T);
    params = s2s->num_parameters();
  } else {
    std::fprintf(stderr, "--model: expected char-gpt, seq2seq or seq2seq-tutorial\n");
    return 2;
  }
  const float weight = 1.f / static_cast<float>(N);
  const auto step = [&] {
    if (lm) {
      lm->zero_grad();
      lm->accumulate(x, y, rows, T, weight);
      lm->apply_gradients();
    } else {
      s2s->zero_grad();
      s2s->accumulate(x, y, z, rows, S, T, weight);
      s2s->apply_gradients();
    }
  };
  double step_s[2] = {0, 0};
  dist::CommStats stats[2];
  size_t buckets = 0;
  for (int overlap = 1; overlap >= 0; --overlap) {
    dist::DataParallelOptions o;
    o.overlap = overlap == 1;
    o.bucket_bytes = static_cast<size_t>(a.bucket_mb * 1024 * 1024);
    dist::DataParallel dp(*comm, o);
    if (lm)
      lm->set_gradient_sync(&dp);
    else
      s2s->set_gradient_sync(&dp);
    for (int i = 0; i < a.warmup; ++i) step();
    double b[1] = {0};
    comm->sum(b);  // line the ranks up
    dp.reset_stats();
    const auto t0 = Clock::now();
    for (int i = 0; i < a.steps; ++i) step();
    step_s[overlap] = std::chrono::duration<double>(Clock::now() - t0).count() / a.steps;
    stats[overlap] = dp.stats();
    buckets = dp.buckets();
    if (lm)
      lm->set_gradient_sync(nullptr);
    else
      s2s->set_gradient_sync(nullptr);
  }
  if (comm->rank() == 0) {
    const double comm_s = stats[0].wait_s / a.steps;  // overlap off: the whole sum, blocking
    const double exposed_s = (stats[1].issue_s + stats[1].wait_s) / a.steps;
    for (int overlap = 1; overlap >= 0; --overlap) {
      const dist::CommStats& s = stats[overlap];
      std::printf(
          "RESULT model=%s ranks=%d threads=1 batch=%d params=%zu buckets=%zu overlap=%s ms_per_step=%.2f "
          "tokens_per_s=%.0f allreduce_mb_per_step=%.2f comm_ms=%.2f exposed_ms=%.2f flag_ms=%.3f overlap_pct=%s\n",
          a.model.c_str(), N, rows * N, params, buckets, overlap ? "on" : "off", step_s[overlap] * 1e3,
          tokens_per_step / step_s[overlap], s.bytes / a.steps / 1e6, comm_s * 1e3,
          (overlap ? exposed_s : comm_s) * 1e3, (s.agree_s / a.steps) * 1e3,
          overlap && N > 1 ? std::to_string(std::lround(100.0 * (1.0 - exposed_s / comm_s))).c_str() : "-");
    }
  }
  return 0;
}
