// qkv_cuda_train: qkv's side of the GPU training benchmark (bench/run_cuda.sh). bench/cuda_torch.py is its
// PyTorch-eager peer: the same two models, the same batches' shapes, the same step, the same FLOP count and the
// same peak table, so that qkv / PyTorch is the ratio of two step times and nothing else.
//
// usage: qkv_cuda_train char-gpt|seq2seq [--device cuda|cpu] [--precision fp32|tf32|bf16] [--steps N] [--warmup N]
//                       [--batch N] [--peak-tflops X]
//
//   char-gpt  nanoGPT's "shakespeare-char" GPU config: V 65, 6 pre-LN layers, 6 heads, 384 wide, context 256,
//             batch 64, GELU, no linear biases, tied head, dropout 0, AdamW (lr 1e-3 constant, betas (0.9, 0.99),
//             wd 0.1 on matrices), clip 1.0. (qkv's LayerNorms keep their bias, torch's have none: 4,992 more
//             parameters of 10.7 M; the FLOP count below is the peer's either way.)
//   seq2seq   the PyTorch translation tutorial's model: vocab 5000/5000, d_model 512, 8 heads, 6+6 post-LN layers,
//             d_ff 2048, ReLU, sinusoidal positions, embeddings x sqrt(d_model), encoder and decoder final norms,
//             dropout 0 (the peer times at 0; the tutorial trains at 0.1), Adam (lr 1e-4, betas (0.9, 0.98),
//             eps 1e-9), no clipping, cross-entropy ignoring pad 0. Source length 100; the target is 100 tokens,
//             read with teacher forcing as the peer does (decoder in tgt[:-1], loss on tgt[1:]: 99 positions).
//   --device     cuda (default) or cpu: the CPU run is a check that the bench trains (use a small --batch);
//                without a GPU, --device cuda prints cuda_unavailable_reason() and exits 1.
//   --precision  fp32 (default), tf32 or bf16: qkv::set_cuda_precision; the peer's allow_tf32, or its bf16 autocast.
//
// A step is one batch's forward, backward and optimizer update. Batches are random token ids from a fixed seed, a
// pool cycled as the peer cycles its own (8 for the char GPT, 4 for the Seq2Seq); ids are in [0, V) for the char
// GPT and [1, V) for the Seq2Seq (no padding). After --warmup untimed steps (10), two timed runs of --steps (50):
//   one by one: train_step, which returns the loss to the host (that copy waits for the step's kernels), each
//               timed; the median (the host's gap between steps counts);
//   queued:     queue_train_step, each loss read one step late (StepLoss), as `qkv train` does: the GPU has the next
//               step queued while the host reads and prepares; the loop's wall time over its steps. The table's
//               figure: the peer's host runs ahead of its GPU too (its events time the GPU alone).
// MFU = model FLOPs per step / the queued step time / the GPU's dense peak for the precision, the peer's table.
// Prints a table and one line per run:
//   RESULT bench=<name> side=qkv precision=<p> device="<gpu>" ms_per_step=<queued> ms_per_step_one_by_one=<median>
//   tokens_per_s=<n> mfu=<x> ...
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "bench_util.h"
#include "qkv/qkv.h"
#include "qkv/seq2seq.h"
#include "runtime/random.h"

#if QKV_CUDA
#include <cuda_runtime.h>

#include "exec/cuda/step_graph.h"
#endif

namespace {

struct Args {
  std::string bench;
  qkv::Device device = qkv::Device::CUDA;
  std::string precision = "fp32";
  int steps = 50, warmup = 10, batch = 64;
  double peak_tflops = 0;  // > 0: overrides the table
};

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s char-gpt|seq2seq [--device cuda|cpu] [--precision fp32|tf32|bf16] [--steps N] [--warmup N]\n"
               "       [--batch N] [--peak-tflops X]   (bench/README.md, \"CUDA\")\n",
               argv0);
  return 2;
}

// n token ids, uniform in [lo, hi), from a fixed seed.
std::vector<int32_t> random_tokens(size_t n, int lo, int hi, uint64_t seed) {
  qkv::Rng rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = int32_t(lo + int64_t(rng.next_u64() % uint64_t(hi - lo)));
  return t;
}

// What main() times: step(i) runs the i-th training step and returns its loss.
struct Bench {
  std::string title;
  std::function<float(int)> step;           // train_step: the loss read at once
  std::function<qkv::StepLoss(int)> queue;  // queue_train_step: the loss read later
  double flops = 0;                         // model FLOPs per step, counted as the peer counts them
  double tokens = 0;                        // tokens per step (the Seq2Seq: target positions)
  size_t params = 0;                        // qkv's parameter count
  size_t peer_params = 0;                   // the peer's, as cuda_torch.py builds the model
};

// ---- char GPT ----
// The peer's count, nanoGPT's estimate_mfu (PaLM appendix B): 6 x (parameters less the position table) per
// token, plus 12 L C T per token for attention (q k^T and P v over the full T x T, causal or not).
// Its parameters: wte V C (tied with the head), per layer ln_1 C + c_attn 3C^2 + c_proj C^2 + ln_2 C + fc 4C^2
// + proj 4C^2, and ln_f C (LayerNorms without bias).
Bench char_gpt(const Args& a) {
  constexpr int V = 65, T = 256, C = 384, H = 6, L = 6, kPool = 8;
  const int B = a.batch;
  qkv::LanguageModelConfig cfg{.vocab_size = V, .context = T, .d_model = C, .heads = H, .layers = L};
  cfg.activation = qkv::Activation::GELU;
  cfg.norm = qkv::NormPosition::Pre;
  cfg.bias = false;
  cfg.positions = qkv::Positions::Learned;
  cfg.tie_head = true;
  cfg.final_norm = true;
  cfg.dropout = 0.f;
  qkv::OptimizerConfig opt;
  opt.kind = qkv::OptimizerKind::AdamW;
  opt.lr = 1e-3f;
  opt.beta1 = 0.9f;
  opt.beta2 = 0.99f;
  opt.eps = 1e-8f;
  opt.weight_decay = 0.1f;
  opt.decay_matrices_only = true;
  opt.grad_clip = 1.0f;
  opt.schedule = qkv::Schedule::Constant;
  auto lm = std::make_shared<qkv::LanguageModel>(cfg, opt, a.device);

  const size_t n = size_t(B) * T;
  auto x = std::make_shared<std::vector<int32_t>>(random_tokens(kPool * n, 0, V, 1));
  auto y = std::make_shared<std::vector<int32_t>>(random_tokens(kPool * n, 0, V, 2));
  Bench b;
  b.title = "char GPT L6 H6 C384 T256 B" + std::to_string(B);
  b.step = [lm, x, y, n, B](int i) {
    const size_t at = size_t(i % kPool) * n;
    return lm->train_step(std::span(*x).subspan(at, n), std::span(*y).subspan(at, n), B, T);
  };
  b.queue = [lm, x, y, n, B](int i) {
    const size_t at = size_t(i % kPool) * n;
    return lm->queue_train_step(std::span(*x).subspan(at, n), std::span(*y).subspan(at, n), B, T);
  };
  const double peer_params = double(V) * C + L * (12.0 * C * C + 2.0 * C) + C;  // less wpe, as nanoGPT counts
  b.flops = (6 * peer_params + 12.0 * L * C * T) * double(B) * T;
  b.tokens = double(n);
  b.params = lm->num_parameters();
  b.peer_params = size_t(peer_params) + size_t(T) * C;  // all of them, wpe included
  return b;
}

// ---- Seq2Seq ----
// The peer's count: 6 x (encoder parameters x source tokens + (decoder parameters + generator weight) x target
// tokens) + 12 C L (B S^2 + B T^2 + B T S) for self-attention on both sides and cross-attention, T = 99 the
// decoder's length. nn.Transformer's parameters: an encoder layer has self-attention (in_proj 3C^2 + 3C,
// out_proj C^2 + C), linear1 (C F + F), linear2 (F C + C) and two LayerNorms (2C each); a decoder layer adds
// cross-attention and a third LayerNorm; each stack ends with a LayerNorm (2C).
Bench seq2seq(const Args& a) {
  constexpr int V = 5000, C = 512, H = 8, L = 6, F = 2048, S = 100, kLen = 100, kPool = 4;
  constexpr int Tt = kLen - 1;  // teacher forcing: the decoder reads tgt[:-1]
  const int B = a.batch;
  qkv::Seq2SeqConfig cfg{.src_vocab = V,
                         .tgt_vocab = V,
                         .context = kLen,
                         .d_model = C,
                         .heads = H,
                         .encoder_layers = L,
                         .decoder_layers = L,
                         .d_ff = F};
  cfg.activation = qkv::Activation::ReLU;
  cfg.norm = qkv::NormPosition::Post;
  cfg.dropout = 0.f;
  cfg.positions = qkv::Positions::Sinusoidal;
  cfg.scale_embedding = true;
  cfg.final_norm = true;
  qkv::OptimizerConfig opt;
  opt.kind = qkv::OptimizerKind::Adam;
  opt.lr = 1e-4f;
  opt.beta1 = 0.9f;
  opt.beta2 = 0.98f;
  opt.eps = 1e-9f;
  opt.weight_decay = 0.f;
  opt.grad_clip = 0.f;
  opt.schedule = qkv::Schedule::Constant;
  auto model = std::make_shared<qkv::Seq2Seq>(cfg, opt, a.device);

  // Each pooled batch: src (B, S) and tgt (B, 100) row-major; tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:].
  struct Batch {
    std::vector<int32_t> src, tgt_in, tgt_out;
  };
  auto pool = std::make_shared<std::vector<Batch>>();
  for (int p = 0; p < kPool; ++p) {
    Batch batch;
    batch.src = random_tokens(size_t(B) * S, 1, V, 1 + 2 * uint64_t(p));
    const std::vector<int32_t> tgt = random_tokens(size_t(B) * kLen, 1, V, 2 + 2 * uint64_t(p));
    for (int r = 0; r < B; ++r) {
      const auto row = tgt.begin() + ptrdiff_t(r) * kLen;
      batch.tgt_in.insert(batch.tgt_in.end(), row, row + Tt);
      batch.tgt_out.insert(batch.tgt_out.end(), row + 1, row + kLen);
    }
    pool->push_back(std::move(batch));
  }
  Bench b;
  b.title = "Seq2Seq 6+6 d512 h8 S100 T100 B" + std::to_string(B);
  b.step = [model, pool, B](int i) {
    const Batch& batch = (*pool)[size_t(i % kPool)];
    return model->train_step(batch.src, batch.tgt_in, batch.tgt_out, B, S, Tt);
  };
  b.queue = [model, pool, B](int i) {
    const Batch& batch = (*pool)[size_t(i % kPool)];
    return model->queue_train_step(batch.src, batch.tgt_in, batch.tgt_out, B, S, Tt);
  };
  const double attn = 4.0 * C * C + 4.0 * C, ff = 2.0 * C * F + F + C;
  const double n_enc = L * (attn + ff + 2 * 2.0 * C) + 2.0 * C;
  const double n_dec = L * (2 * attn + ff + 3 * 2.0 * C) + 2.0 * C + double(V) * C;  // + the generator's weight
  b.flops = 6 * (n_enc * B * S + n_dec * B * Tt) +
            12.0 * C * L * (double(B) * S * S + double(B) * Tt * Tt + double(B) * Tt * S);
  b.tokens = double(B) * Tt;
  b.params = model->num_parameters();
  b.peer_params = size_t(n_enc + n_dec) + 2 * size_t(V) * C + V;  // + both embeddings and the generator's bias
  return b;
}

// The device's name for the table: the GPU's (cudaGetDeviceProperties), or the CPU's instruction set.
std::string device_name(qkv::Device device) {
#if QKV_CUDA
  if (device == qkv::Device::CUDA) {
    int id = 0;
    cudaDeviceProp p{};
    if (cudaGetDevice(&id) == cudaSuccess && cudaGetDeviceProperties(&p, id) == cudaSuccess) return p.name;
    cudaGetLastError();
    return "CUDA device (name unavailable)";
  }
#else
  (void)device;
#endif
  return "CPU " + qkv::active_isa() + " x" + std::to_string(qkv::num_threads());
}

// Dense peak TFLOP/s (no sparsity) for the precision, the peer's table and its matching (first substring of the
// GPU's name that matches; "H100 PCIe" before "H100"), or NaN where there is none (the CPU, an unlisted GPU).
struct Peak {
  double tflops = std::numeric_limits<double>::quiet_NaN();
  std::string source = "none";
};
Peak peak_tflops(const Args& a, const std::string& name) {
  if (a.peak_tflops > 0) return {a.peak_tflops, "--peak-tflops"};
  if (a.device != qkv::Device::CUDA) return {};
  struct Row {
    const char* key;
    double fp32, tf32, bf16;
  };
  static constexpr Row kTable[] = {
      {"H100 PCIe", 51.2, 378.0, 756.0},
      {"H100", 66.9, 494.7, 989.4},  // SXM5 / HBM3
      {"H200", 66.9, 494.7, 989.4},
      {"A100", 19.5, 156.0, 312.0},
  };
  for (const Row& r : kTable)
    if (name.find(r.key) != std::string::npos)
      return {a.precision == "tf32"   ? r.tf32
              : a.precision == "bf16" ? r.bf16
                                      : r.fp32,
              std::string("datasheet ") + r.key + " dense"};
  return {};
}

int run(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line through `| tee`
  if (argc < 2) return usage(argv[0]);
  Args a;
  a.bench = argv[1];
  if (a.bench != "char-gpt" && a.bench != "seq2seq") return usage(argv[0]);
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage(argv[0]);
    const std::string value = argv[++i];
    if (flag == "--device" && (value == "cuda" || value == "cpu"))
      a.device = value == "cuda" ? qkv::Device::CUDA : qkv::Device::CPU;
    else if (flag == "--precision" && (value == "fp32" || value == "tf32" || value == "bf16"))
      a.precision = value;
    else if (flag == "--steps")
      a.steps = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--warmup")
      a.warmup = std::max(0, std::atoi(value.c_str()));
    else if (flag == "--batch")
      a.batch = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--peak-tflops")
      a.peak_tflops = std::atof(value.c_str());
    else
      return usage(argv[0]);
  }
  const bool cuda = a.device == qkv::Device::CUDA;
  if (cuda && qkv::cuda_device_count() == 0) {
    std::fprintf(stderr, "qkv_cuda_train: --device cuda: %s\n", qkv::cuda_unavailable_reason().c_str());
    return 1;
  }
  if (!cuda && a.precision != "fp32") {
    std::fprintf(stderr, "qkv_cuda_train: --precision %s is a CUDA setting; the CPU computes in fp32\n",
                 a.precision.c_str());
    return 2;
  }
  if (cuda) qkv::set_cuda_precision(qkv::parse_cuda_precision(a.precision, "--precision"));

  Bench b = a.bench == "char-gpt" ? char_gpt(a) : seq2seq(a);
  const std::string dev = device_name(a.device);
  const Peak peak = peak_tflops(a, dev);

  std::vector<float> losses;
  for (int i = 0; i < a.warmup; ++i) losses.push_back(b.step(i));
  // One by one: each step's loss read before the next is queued (the host's gap between steps counts).
  std::vector<double> ms(size_t(a.steps));
  for (int i = 0; i < a.steps; ++i) {
    const qkv::bench::Timer t;
    losses.push_back(b.step(a.warmup + i));  // the loss comes back to the host: the step has finished
    ms[size_t(i)] = 1e3 * t.seconds();
  }
  double total = 0;
  for (double m : ms) total += m;
  const double mean = total / a.steps;
  std::sort(ms.begin(), ms.end());
  const double sync_median = ms[ms.size() / 2];
  // Queued, as `qkv train` runs: each loss read one step late, so the GPU has the next step while the host reads
  // and prepares (StepLoss). The time of the whole loop, the last loss read, over its steps.
  double queued = 0;
  {
    const int from = a.warmup + a.steps;
    const qkv::bench::Timer t;
    qkv::StepLoss last;
    for (int i = 0; i < a.steps; ++i) {
      qkv::StepLoss l = b.queue(from + i);
      if (last.valid()) losses.push_back(last.get());
      last = l;
    }
    losses.push_back(last.get());
    queued = 1e3 * t.seconds() / a.steps;
  }
  // The table's figure: the queued loop's (the peer's host runs ahead of its GPU too).
  const double median = queued;
  const double tokens_per_s = b.tokens / (median / 1e3), tflops = b.flops / (median / 1e3) / 1e12;
  const double mfu = tflops / peak.tflops;  // NaN without a peak
  const float first = losses.front(), last = losses.back();

  std::printf("\n== qkv %s, %s, %s, %s; %d warm-up + %d timed steps; %zu parameters (the peer: %zu)\n", qkv::version(),
              b.title.c_str(), a.precision.c_str(), dev.c_str(), a.warmup, a.steps, b.params, b.peer_params);
  std::printf("%-10s %9s %9s %12s %9s %7s %9s   %s\n", "side", "ms/step", "mean ms", "tokens/s", "TFLOP/s", "MFU",
              "peak", "loss first -> last");
  char mfu_cell[16] = "-", peak_cell[16] = "-";  // no peak (the CPU, an unlisted GPU): no MFU
  if (!std::isnan(mfu)) {
    std::snprintf(mfu_cell, sizeof mfu_cell, "%.1f%%", 100 * mfu);
    std::snprintf(peak_cell, sizeof peak_cell, "%.1f", peak.tflops);
  }
  std::printf("%-10s %9.2f %9.2f %12.0f %9.2f %7s %9s   %.4f -> %.4f\n", "qkv", median, median, tokens_per_s, tflops,
              mfu_cell, peak_cell, double(first), double(last));
  std::printf("%-10s %9.2f %9.2f %12.0f   (each loss read before the next step: train_step)\n", "one-by-one",
              sync_median, mean, b.tokens / (sync_median / 1e3));
  std::printf("peak: %s (TFLOP/s, %s)\n", peak.source.c_str(), a.precision.c_str());
#if QKV_CUDA
  if (a.device == qkv::Device::CUDA) {
    // What the step graph did over the run (exec/cuda/step_graph.h): the timed steps should all be replays.
    const auto& g = qkv::kernels::cuda::step_graph().counts();
    std::printf("CUDA graph: %s; %lld captured, %lld replayed, %lld run again op by op\n",
                qkv::kernels::cuda::step_graph().enabled() ? "on" : "off (QKV_CUDA_GRAPH=0)", g.captured, g.replayed,
                g.retried);
  }
#endif
  std::printf(
      "RESULT bench=%s side=qkv precision=%s device=\"%s\" qkv=%s batch=%d steps=%d ms_per_step=%.3f "
      "ms_per_step_one_by_one=%.3f mean_ms_one_by_one=%.3f tokens_per_s=%.1f model_tflop_per_step=%.4f peak_tflops=%g "
      "peak_source=\"%s\" mfu=%.4f loss_first=%.4f loss_last=%.4f\n",
      a.bench.c_str(), a.precision.c_str(), dev.c_str(), qkv::version(), a.batch, a.steps, median, sync_median, mean,
      tokens_per_s, b.flops / 1e12, peak.tflops, peak.source.c_str(), mfu, double(first), double(last));
  if (!std::isfinite(first) || !std::isfinite(last)) {
    std::fprintf(stderr, "qkv_cuda_train: the loss is not finite\n");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv_cuda_train: %s\n", e.what());
    return 1;
  }
}
