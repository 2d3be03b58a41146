// Loading at the size of the weights (issue 35): seconds, MB/s and peak resident memory of
// LanguageModel::load_file on a GPT-2-124M-shaped checkpoint, and the files the comparison needs.
//
//   qkv_load_bench write-qkv OUT        a qkv checkpoint of GPT-2 124M's shape (12 layers, 12 heads, 768 wide,
//                                       vocab 50257, context 1024, tied head), random weights, no optimizer state
//   qkv_load_bench write-nanogpt OUT    the same shape as a state dict in nanoGPT's names (transformer.h.N...),
//                                       random weights, F32, no attn.bias buffers, head tied (absent)
//   qkv_load_bench write-hub DIR        the same shape as a Hugging Face folder (config.json, model.safetensors in
//                                       the Hub's names: Conv1D weights (in, out), attn.bias buffers, no lm_head)
//   qkv_load_bench load FILE            LanguageModel::load_file(FILE) once, in this fresh process
//
// `load` prints one line, which bench/run_load.sh collects:
//   RESULT bench=load file_mb=<MB> seconds=<s> cpu_seconds=<s> mb_per_s=<MB/s> peak_rss_mb=<MB> peak_over_file=<x>
// The peak is the process's (VmHWM) after the load, so run one load per process. cpu_seconds is the process's user +
// system time during the load: on a shared machine (the 2-core development box runs other builds) it is the figure
// that the others' load does not inflate. Every MB here is 10^6 bytes.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "qkv/qkv.h"
#include "qkv/safetensors.h"

namespace {

using qkv::bench::Timer;

// The process's peak and current resident memory (VmHWM, VmRSS from /proc/self/status) in MB.
double status_mb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, n, key) == 0) return std::stod(line.substr(n + 1)) * 1024.0 / 1e6;  // kB
  return 0.0;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

qkv::LanguageModelConfig gpt2_124m() {
  qkv::LanguageModelConfig c;
  c.vocab_size = 50257;
  c.context = 1024;
  c.d_model = 768;
  c.heads = 12;
  c.layers = 12;
  c.activation = qkv::Activation::GELU;
  c.norm = qkv::NormPosition::Pre;
  c.bias = true;
  c.tie_head = true;
  return c;
}

int write_qkv(const std::string& out) {
  Timer t;
  qkv::LanguageModel lm(gpt2_124m());
  lm.save_file(out, false);
  std::printf("wrote %s (%zu parameters) in %.1f s\n", out.c_str(), lm.num_parameters(), t.seconds());
  return 0;
}

// GPT-2 124M's tensors in the names of nanoGPT (nn.Linear, (out, in), under "transformer.") or of the Hugging Face
// Hub (Conv1D, (in, out), bare names, with the attn.bias causal masks the Hub's gpt2 file keeps), random weights.
std::vector<std::pair<std::string, std::vector<int64_t>>> gpt2_tensors(bool hub) {
  const int64_t V = 50257, T = 1024, C = 768, L = 12;
  const std::string p = hub ? "" : "transformer.";
  const auto linear = [&](int64_t out, int64_t in) {
    return hub ? std::vector<int64_t>{in, out} : std::vector{out, in};
  };
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{p + "wte.weight", {V, C}},
                                                                      {p + "wpe.weight", {T, C}}};
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = p + "h." + std::to_string(l) + ".";
    for (const auto& [name, shape] :
         std::vector<std::pair<std::string, std::vector<int64_t>>>{{"ln_1.weight", {C}},
                                                                   {"ln_1.bias", {C}},
                                                                   {"attn.c_attn.weight", linear(3 * C, C)},
                                                                   {"attn.c_attn.bias", {3 * C}},
                                                                   {"attn.c_proj.weight", linear(C, C)},
                                                                   {"attn.c_proj.bias", {C}},
                                                                   {"ln_2.weight", {C}},
                                                                   {"ln_2.bias", {C}},
                                                                   {"mlp.c_fc.weight", linear(4 * C, C)},
                                                                   {"mlp.c_fc.bias", {4 * C}},
                                                                   {"mlp.c_proj.weight", linear(C, 4 * C)},
                                                                   {"mlp.c_proj.bias", {C}}})
      shapes.push_back({h + name, shape});
    if (hub) shapes.push_back({h + "attn.bias", {1, 1, T, T}});
  }
  shapes.push_back({p + "ln_f.weight", {C}});
  shapes.push_back({p + "ln_f.bias", {C}});
  return shapes;
}

void write_gpt2(const std::string& out, bool hub) {
  const auto shapes = gpt2_tensors(hub);
  std::mt19937 rng(1337);
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::vector<std::vector<float>> values;
  std::vector<qkv::TensorRef> refs;
  values.reserve(shapes.size());
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    values.emplace_back(static_cast<size_t>(n));
    if (shape.size() == 4) {  // h.N.attn.bias
      const int64_t T = shape[3];  // the causal mask: ones on and below the diagonal
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j <= i; ++j) values.back()[static_cast<size_t>(i * T + j)] = 1.f;
    } else {
      for (float& x : values.back()) x = normal(rng);
    }
    refs.emplace_back(name, shape, std::span<const float>(values.back()));
  }
  qkv::write_safetensors_atomic(out, refs, {{"format", "pt"}});
  std::printf("wrote %s (%zu tensors)\n", out.c_str(), refs.size());
}

int write_nanogpt(const std::string& out) {
  write_gpt2(out, false);
  return 0;
}

// A folder as the Hub serves openai-community/gpt2: config.json and model.safetensors (548 MB with its buffers).
int write_hub(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "bos_token_id": 50256, )"
         R"("eos_token_id": 50256, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, )"
         R"("n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257})";
  write_gpt2(dir + "/model.safetensors", true);
  return 0;
}

int load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "qkv_load_bench: cannot stat %s\n", path.c_str());
    return 1;
  }
  const double file_mb = static_cast<double>(st.st_size) / 1e6;
  const double base = status_mb("VmRSS:");
  const double cpu0 = cpu_seconds();
  Timer t;
  const auto lm = qkv::LanguageModel::load_file(path);
  const double seconds = t.seconds(), cpu = cpu_seconds() - cpu0;
  const double peak = status_mb("VmHWM:");
  std::printf("loaded %s: %zu parameters\n", path.c_str(), lm->num_parameters());
  std::printf(
      "RESULT bench=load file_mb=%.1f seconds=%.3f cpu_seconds=%.3f mb_per_s=%.0f peak_rss_mb=%.1f "
      "peak_over_file=%.2f base_rss_mb=%.1f\n",
      file_mb, seconds, cpu, file_mb / seconds, peak, peak / file_mb, base);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  try {
    if (argc == 3 && command == "write-qkv") return write_qkv(argv[2]);
    if (argc == 3 && command == "write-nanogpt") return write_nanogpt(argv[2]);
    if (argc == 3 && command == "write-hub") return write_hub(argv[2]);
    if (argc == 3 && command == "load") return load(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv_load_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: qkv_load_bench write-qkv OUT | write-nanogpt OUT | write-hub DIR | load FILE\n");
  return 2;
}
