// The accuracy of quantized weights against float32 (issue 36, "Accuracy, stated and tested"; bench/quant_accuracy.sh
// runs it, bench/README.md "Accuracy of quantized weights" explains the figures):
//
//   qkv_quant_accuracy lm REF HELDOUT [FORMAT=CKPT ...] [--threads N] [--batch N] [--logit-bound X]
//       REF: a float32 language-model checkpoint written by `qkv train` (its tokenizer inside); HELDOUT: a text the
//       training never saw. The text is cut into consecutive windows of the model's context, as `qkv eval` cuts it;
//       each FORMAT=CKPT (`qkv quantize --weights FORMAT REF CKPT`) is compared with REF on them.
//   qkv_quant_accuracy gpt2 REF [FORMAT=CKPT ...] [--threads N] [--prompt N] [--new N] [--logit-bound X]
//       REF: a float32 GPT-2 checkpoint (`qkv import` of bench/gpt2_export.py's random Hub folder). The sequence is
//       the benchmark's prompt ((i * 7919 + 13) mod vocabulary, i < --prompt) and REF's own greedy continuation of
//       --new tokens (row 0), and as many tokens drawn uniformly from the vocabulary (row 1, seed 1); each CKPT is
//       compared with REF on both rows.
//   FORMAT is int8, q4, f16 or bf16, optionally with a suffix after '-' naming a variant of that format (q4-f32emb:
//   `qkv quantize --weights q4 --embedding false`); the checkpoint must hold that format and the bound is its.
//
// Per format, over every position (p = softmax of REF's logits z, q = the format's, of logits z'):
//   ppl          exp(mean of -log q(target)): lm: the held-out text's next characters; gpt2: the greedy
//                continuation's tokens (each predicted from the tokens before it)
//   ppl_uniform  gpt2 only: the same over row 1's uniform tokens (near the vocabulary size whatever the weights)
//   logit_rel    max |z' - z| / max |z| over all positions and the vocabulary (README's "within x of the largest
//                logit", as tests/cpp/models/quantize_accuracy_test.cpp measures it)
//   kl_mean      mean over positions of KL(p || q) = sum_v p_v (log p_v - log q_v), in nats; kl_max its largest
//   argmax       the fraction of positions whose argmax of z' is that of z
// and, against the stated bounds (int8: ppl within +-0.5% of float32's; q4: within 5%; f16: logit_rel < 1e-3; bf16:
// < 1e-2), PASS or FAIL. On the gpt2 shape the perplexity bounds are applied to the continuation's perplexity (the
// weights are random: bench/README.md says why a held-out text's perplexity would say little there).
// --logit-bound X replaces every format's bound by logit_rel < X: with REF a float32 checkpoint holding the
// dequantized weights of CKPT (bench/quant_weight_error.py --dequantized), it bounds the error qkv's quantized
// products add to the weights' own (1e-5: tests/cpp/models/quantize_test.cpp's tolerance).
//
// Output: a RESULT line per format (stage=, format=, the figures, bound=, verdict=), then the table. Exit status 0
// when every bound holds, 1 when one fails, 2 on bad usage or an error (a file that cannot be read, a checkpoint
// of another format than its name).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "qkv/qkv.h"
#include "qkv/quantize.h"
#include "qkv/safetensors.h"
#include "qkv/sampling.h"
#include "qkv/tokenizer.h"

namespace {

using qkv::bench::Timer;

struct Args {
  std::string stage, ref, heldout;
  std::vector<std::pair<std::string, std::string>> formats;  // (name, checkpoint)
  int threads = 2, batch = 32, prompt = 32, fresh = 224;
  double logit_bound = 0;  // > 0: every format's bound is logit_rel < logit_bound (--logit-bound)
};

// The positions a comparison runs over: rows of `seq` tokens (inputs) and the next token of each (targets). scored
// says which perplexity a position's target counts in: kNone, kMain (ppl; gpt2: the continuation only) or
// kUniform (ppl_uniform).
enum Scored : uint8_t { kNone = 0, kMain = 1, kUniform = 2 };
struct Windows {
  std::vector<int32_t> inputs, targets;
  std::vector<uint8_t> scored;
  int rows = 0, seq = 0;
};

// All logits (rows * seq, V) of `windows`, `batch` rows per call (the activations of every held-out window at once
// would not fit a small machine).
std::vector<float> all_logits(qkv::LanguageModel& m, const Windows& w, int batch) {
  std::vector<float> out;
  for (int r = 0; r < w.rows; r += batch) {
    const int rows = std::min(batch, w.rows - r);
    const auto first = w.inputs.begin() + static_cast<std::ptrdiff_t>(r) * w.seq;
    const std::vector<int32_t> in(first, first + static_cast<std::ptrdiff_t>(rows) * w.seq);
    const std::vector<float> z = m.logits(in, rows, w.seq);
    out.insert(out.end(), z.begin(), z.end());
  }
  return out;
}

// log softmax of one row, in double.
void log_softmax(const float* z, int V, std::vector<double>& out) {
  out.resize(static_cast<size_t>(V));
  double mx = z[0];
  for (int v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(z[v]));
  double sum = 0;
  for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(z[v]) - mx);
  const double lse = mx + std::log(sum);
  for (int v = 0; v < V; ++v) out[static_cast<size_t>(v)] = static_cast<double>(z[v]) - lse;
}

struct Figures {
  double ppl = 0, ppl_uniform = 0, logit_rel = 0, kl_mean = 0, kl_max = 0, argmax = 0, seconds = 0;
};

// The figures of logits z (of the format) against ref (float32's; ref itself gives float32's own row).
Figures compare(const std::vector<float>& z, const std::vector<float>& ref, const Windows& w, int V) {
  Figures f;
  const size_t n = static_cast<size_t>(w.rows) * static_cast<size_t>(w.seq);
  double scale = 0, worst = 0, kl_sum = 0, nll[3] = {0, 0, 0};
  long long scored[3] = {0, 0, 0}, agree = 0;
  std::vector<double> lp, lq;
  for (size_t i = 0; i < n; ++i) {
    const float* a = ref.data() + i * static_cast<size_t>(V);
    const float* b = z.data() + i * static_cast<size_t>(V);
    log_softmax(a, V, lp);
    log_softmax(b, V, lq);
    double kl = 0;
    int arg_a = 0, arg_b = 0;
    for (int v = 0; v < V; ++v) {
      scale = std::max(scale, std::abs(static_cast<double>(a[v])));
      worst = std::max(worst, std::abs(static_cast<double>(b[v]) - a[v]));
      kl += std::exp(lp[size_t(v)]) * (lp[size_t(v)] - lq[size_t(v)]);
      if (a[v] > a[arg_a]) arg_a = v;
      if (b[v] > b[arg_b]) arg_b = v;
    }
    kl_sum += kl;
    f.kl_max = std::max(f.kl_max, kl);
    agree += arg_a == arg_b;
    nll[w.scored[i]] -= lq[static_cast<size_t>(w.targets[i])];
    ++scored[w.scored[i]];
  }
  f.ppl = std::exp(nll[kMain] / static_cast<double>(std::max(1LL, scored[kMain])));
  f.ppl_uniform = scored[kUniform] ? std::exp(nll[kUniform] / static_cast<double>(scored[kUniform])) : 0.0;
  f.logit_rel = scale > 0 ? worst / scale : 0;
  f.kl_mean = kl_sum / static_cast<double>(n);
  f.argmax = static_cast<double>(agree) / static_cast<double>(n);
  return f;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw qkv::Error(path + ": cannot open for reading");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The held-out text in consecutive windows of the context: what `qkv eval` scores (cpp/tools/task.cpp).
Windows lm_windows(const std::string& ref, const std::string& heldout, int context) {
  const qkv::SafetensorsFile file = qkv::read_safetensors(ref);
  const auto tok_json = file.metadata.find("qkv.tokenizer");
  if (tok_json == file.metadata.end())
    throw qkv::Error(ref + ": no qkv.tokenizer in the metadata (not from qkv train?)");
  const qkv::Tokenizer tok = qkv::Tokenizer::from_json(tok_json->second);
  const std::vector<int32_t> ids = tok.encode(read_file(heldout));
  if (ids.size() < 2) throw qkv::Error(heldout + ": " + std::to_string(ids.size()) + " tokens: expected at least 2");
  Windows w;
  w.seq = static_cast<int>(std::min<size_t>(static_cast<size_t>(context), ids.size() - 1));
  w.rows = static_cast<int>((ids.size() - 1) / static_cast<size_t>(w.seq));
  for (int r = 0; r < w.rows; ++r) {
    const auto o = ids.begin() + static_cast<std::ptrdiff_t>(r) * w.seq;
    w.inputs.insert(w.inputs.end(), o, o + w.seq);
    w.targets.insert(w.targets.end(), o + 1, o + 1 + w.seq);
  }
  w.scored.assign(w.targets.size(), kMain);
  std::printf("held-out: %s, %zu tokens, %d windows of %d\n", heldout.c_str(), ids.size(), w.rows, w.seq);
  return w;
}

// Row 0: the prompt, then the float32 model's greedy continuation, whose tokens alone are scored (kMain); row 1:
// uniform tokens (kUniform).
Windows gpt2_windows(qkv::LanguageModel& m, int prompt_len, int fresh) {
  const int V = m.config().vocab_size;
  std::vector<int32_t> seq(static_cast<size_t>(prompt_len));
  for (int i = 0; i < prompt_len; ++i) seq[size_t(i)] = static_cast<int32_t>((int64_t(i) * 7919 + 13) % V);
  qkv::SamplingOptions s;
  s.max_new_tokens = fresh;
  s.temperature = 0.f;
  const Timer t;
  const std::vector<int32_t> more = m.generate(seq, s);
  std::printf("float32 greedy continuation: %zu tokens in %.1f s, first:", more.size(), t.seconds());
  for (size_t i = 0; i < std::min<size_t>(16, more.size()); ++i) std::printf(" %d", more[i]);
  std::printf("\n");
  seq.insert(seq.end(), more.begin(), more.end());
  std::vector<int32_t> uniform(seq.size());
  std::mt19937_64 rng(1);
  for (int32_t& id : uniform) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
  Windows w;
  w.rows = 2;
  w.seq = static_cast<int>(seq.size()) - 1;
  w.scored.assign(2 * static_cast<size_t>(w.seq), kNone);
  for (int i = prompt_len - 1; i < w.seq; ++i) w.scored[size_t(i)] = kMain;  // position i predicts token i + 1
  for (int i = 0; i < w.seq; ++i) w.scored[size_t(w.seq + i)] = kUniform;
  for (const auto* row : {&seq, &uniform}) {
    w.inputs.insert(w.inputs.end(), row->begin(), row->end() - 1);
    w.targets.insert(w.targets.end(), row->begin() + 1, row->end());
  }
  return w;
}

struct Bound {
  std::string what = "-";
  bool pass = true;
};

// The stated bound of a format (README "Quantized weights") and whether f meets it against float32's figures; with
// logit_bound > 0, logit_rel < logit_bound whatever the format.
Bound bound_of(const std::string& format, const Figures& f, const Figures& base, double logit_bound) {
  if (logit_bound > 0) {
    char what[48];
    std::snprintf(what, sizeof what, "logit_rel < %g", logit_bound);
    return {what, f.logit_rel < logit_bound};
  }
  const double rel = (f.ppl - base.ppl) / base.ppl;
  if (format == "int8") return {"ppl within 0.5%", std::abs(rel) < 0.005};
  if (format == "q4") return {"ppl within 5%", std::abs(rel) < 0.05};
  if (format == "f16") return {"logit_rel < 1e-3", f.logit_rel < 1e-3};
  if (format == "bf16") return {"logit_rel < 1e-2", f.logit_rel < 1e-2};
  return {};
}

int run(const Args& a) {
  qkv::set_num_threads(a.threads);
  const Timer total;
  std::unique_ptr<qkv::LanguageModel> ref = qkv::LanguageModel::load_file(a.ref);
  ref->set_training(false);
  const int V = ref->config().vocab_size;
  std::printf("stage %s: float32 %s (%.1f MB of weights, vocabulary %d, context %d), threads %d, isa %s\n",
              a.stage.c_str(), a.ref.c_str(), double(ref->memory().parameters) / 1e6, V, ref->config().context,
              qkv::num_threads(), qkv::active_isa().c_str());
  const Windows w =
      a.stage == "lm" ? lm_windows(a.ref, a.heldout, ref->config().context) : gpt2_windows(*ref, a.prompt, a.fresh);
  Timer t;
  const std::vector<float> base_logits = all_logits(*ref, w, a.batch);
  Figures base = compare(base_logits, base_logits, w, V);
  base.seconds = t.seconds();
  const double base_mb = double(ref->memory().parameters) / 1e6;
  ref.reset();  // one model in memory at a time besides the logits (GPT-2's float32 weights are 498 MB)

  struct Row {
    std::string format;
    Figures f;
    Bound b;
    double mb = 0;
  };
  std::vector<Row> rows;
  bool all_pass = true;
  for (const auto& [name, path] : a.formats) {
    t = Timer();
    auto m = qkv::LanguageModel::load_file(path);
    m->set_training(false);
    const std::string format = name.substr(0, name.find('-'));  // q4-f32emb: q4's checkpoint and bound
    const auto formats = m->weight_formats();
    if (formats.empty()) throw qkv::Error(path + ": holds no quantized weights (expected " + format + ")");
    for (const auto& [tensor, f] : formats)
      if (format != qkv::to_string(f))
        throw qkv::Error(path + ": " + tensor + " is " + qkv::to_string(f) + ", not " + format);
    const std::vector<float> z = all_logits(*m, w, a.batch);
    Row r;
    r.format = name;
    r.f = compare(z, base_logits, w, V);
    r.f.seconds = t.seconds();
    r.b = bound_of(format, r.f, base, a.logit_bound);
    r.mb = double(m->memory().parameters) / 1e6;
    all_pass = all_pass && r.b.pass;
    char uniform[96] = "";  // gpt2: row 1's perplexity
    if (base.ppl_uniform > 0)
      std::snprintf(uniform, sizeof uniform, " ppl_uniform=%.1f ppl_uniform_f32=%.1f", r.f.ppl_uniform,
                    base.ppl_uniform);
    std::printf(
        "RESULT stage=%s format=%s ppl=%.6f ppl_f32=%.6f ppl_rel=%+.6f%s logit_rel=%.3e kl_mean=%.3e kl_max=%.3e "
        "argmax=%.6f weights_mb=%.1f seconds=%.1f bound=\"%s\" verdict=%s\n",
        a.stage.c_str(), name.c_str(), r.f.ppl, base.ppl, (r.f.ppl - base.ppl) / base.ppl, uniform, r.f.logit_rel,
        r.f.kl_mean, r.f.kl_max, r.f.argmax, r.mb, r.f.seconds, r.b.what.c_str(), r.b.pass ? "PASS" : "FAIL");
    rows.push_back(r);
  }

  const long long n = static_cast<long long>(w.rows) * w.seq;
  const long long scored = std::count(w.scored.begin(), w.scored.end(), kMain);
  std::printf("\n%s: %lld positions, %lld scored in the perplexity (%s)\n", a.stage.c_str(), n, scored,
              a.stage == "lm" ? "the held-out text" : "float32's greedy continuation");
  if (a.stage == "gpt2") {  // row 1: what a held-out perplexity of random weights would measure
    std::printf("perplexity of row 1's %d uniform tokens: f32 %.1f", w.seq, base.ppl_uniform);
    for (const Row& r : rows) std::printf(", %s %.1f", r.format.c_str(), r.f.ppl_uniform);
    std::printf(" (vocabulary %d)\n", V);
  }
  std::printf(
      "| format | weights MB | perplexity | vs float32 | logits: max abs diff / max abs | KL mean (nats) | KL max "
      "| argmax = float32's | bound | verdict |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::printf("| f32 | %.2f | %.4f | - | - | - | - | - | - | - |\n", base_mb, base.ppl);
  for (const Row& r : rows)
    std::printf("| %s | %.2f | %.4f | %+.4f%% | %.2e | %.2e | %.2e | %.2f%% | %s | %s |\n", r.format.c_str(), r.mb,
                r.f.ppl, 100.0 * (r.f.ppl - base.ppl) / base.ppl, r.f.logit_rel, r.f.kl_mean, r.f.kl_max,
                100.0 * r.f.argmax, r.b.what.c_str(), r.b.pass ? "PASS" : "FAIL");
  std::printf("(%.1f s in all)\n", total.seconds());
  return all_pass ? 0 : 1;
}

int usage() {
  std::fprintf(
      stderr,
      "usage: qkv_quant_accuracy lm REF HELDOUT [FORMAT=CKPT ...] [--threads N] [--batch N] [--logit-bound X]\n"
      "       qkv_quant_accuracy gpt2 REF [FORMAT=CKPT ...] [--threads N] [--prompt N] [--new N] "
      "[--logit-bound X]\n"
      "       (bench/README.md, \"Accuracy of quantized weights\")\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Args a;
  if (argc < 3) return usage();
  a.stage = argv[1];
  a.ref = argv[2];
  int i = 3;
  if (a.stage == "lm") {
    if (argc < 4) return usage();
    a.heldout = argv[i++];
  } else if (a.stage != "gpt2") {
    return usage();
  }
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) == 0) {
      if (i + 1 >= argc) return usage();
      if (arg == "--logit-bound") {
        a.logit_bound = std::strtod(argv[++i], nullptr);
        if (!(a.logit_bound > 0)) return usage();
        continue;
      }
      const int v = std::atoi(argv[++i]);
      if (v <= 0) return usage();
      if (arg == "--threads")
        a.threads = v;
      else if (arg == "--batch")
        a.batch = v;
      else if (arg == "--prompt")
        a.prompt = v;
      else if (arg == "--new")
        a.fresh = v;
      else
        return usage();
      continue;
    }
    const size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) return usage();
    a.formats.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv_quant_accuracy: %s\n", e.what());
    return 2;
  }
}
