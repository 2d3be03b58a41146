// The buffers a state dict keeps beside its weights, which qkv computes itself: checked against what qkv
// computes, then ignored (io/import_buffers.h).
#include "io/import_buffers.h"

#include <cmath>
#include <regex>

#include "qkv/error.h"

namespace qkv::io {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_causal_tril(const std::vector<float>& v, int64_t T) {
  if (static_cast<int64_t>(v.size()) != T * T) return false;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      if (v[i * T + j] != (j <= i ? 1.f : 0.f)) return false;
  return true;
}

// A sinusoidal position buffer ("pe" of the seeds, the tutorial's "pos_embedding"), as (rows, C).
bool is_position_buffer(const std::string& n) {
  return n == "pe" || ends_with(n, ".pe") || n == "pos_embedding" || ends_with(n, ".pos_embedding");
}
// nanoGPT's causal mask, a buffer of (1, 1, T, T) ones below the diagonal, where PyTorch lacks
// scaled_dot_product_attention.
bool is_causal_mask_buffer(const std::string& n, const TensorEntry& t) {
  static const std::regex re(R"(transformer\.h\.\d+\.attn\.bias)");
  return std::regex_match(n, re) && t.shape.size() == 4 && t.shape[0] == 1 && t.shape[1] == 1 &&
         t.shape[2] == t.shape[3];
}

std::string check_position_buffer(const SafetensorsFile& file, const TensorEntry& t, const std::string& name,
                                  int64_t C) {
  int64_t rows = 0, width = 0;
  if (t.shape.size() == 2) rows = t.shape[0], width = t.shape[1];
  if (t.shape.size() == 3 && t.shape[0] == 1) rows = t.shape[1], width = t.shape[2];  // (1, L, C): the seeds
  if (t.shape.size() == 3 && t.shape[1] == 1) rows = t.shape[0], width = t.shape[2];  // (L, 1, C): the tutorial
  if (width != C || C % 2 != 0)
    return detail::cat("tensor \"", name, "\" has shape ", shape_text(t.shape), ", expected a sinusoidal table of ", C,
                       " columns");
  const auto v = file.floats(t.name);
  double worst = 0;
  // qkv's table (and every tutorial's): pe[p, 2i] = sin(p w_i), pe[p, 2i+1] = cos(p w_i), w_i = 10000^(-2i/C).
  // The sources compute it in float32, whose argument rounding grows with p: 2e-3 tells a table of another
  // formula from a rounding difference.
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t i = 0; i < C; i += 2) {
      const double w = std::exp(-static_cast<double>(i) * std::log(10000.0) / static_cast<double>(C));
      worst = std::max(worst, std::abs(v[p * C + i] - std::sin(p * w)));
      worst = std::max(worst, std::abs(v[p * C + i + 1] - std::cos(p * w)));
    }
  if (!(worst <= 2e-3))
    return detail::cat("tensor \"", name, "\" is not the sinusoidal position table qkv computes (differs by ", worst,
                       ")");
  return "";
}

// GPT-2's attention buffers: "h.N.attn.bias", the causal mask (1, 1, P, P) of ones on and below the diagonal
// (F32 in the files converted from the first releases, BOOL or U8 in later ones), and "h.N.attn.masked_bias",
// the score of a masked position (a scalar, -1e4; -inf in some exports). Checked, counted in `seen`, then
// ignored: true when `n` is one (a wrong one is added to `wrong`).
bool is_gpt2_buffer(const std::string& n) {
  static const std::regex re(R"(h\.\d+\.attn\.(bias|masked_bias))");
  return std::regex_match(n, re);
}

bool gpt2_buffer(const SafetensorsFile& file, const std::string& n, const TensorEntry& t, const std::string& name,
                 std::vector<std::string>& wrong, std::map<std::string, int>& seen) {
  static const std::regex re(R"(h\.\d+\.attn\.(bias|masked_bias))");
  std::smatch m;
  if (!std::regex_match(n, m, re)) return false;
  const bool is_float = t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16" || t.dtype == "F64";
  const auto values = [&] {
    if (is_float) return file.floats(t.name);
    std::vector<float> v;
    for (int64_t x : file.ints(t.name)) v.push_back(static_cast<float>(x));
    return v;
  };
  if (m[1] == "masked_bias") {
    const float v = t.numel() == 1 && is_float ? file.floats(t.name)[0] : 0.f;
    if (t.numel() != 1 || !is_float || !(v == -1e4f || v == -INFINITY))
      wrong.push_back(detail::cat("tensor \"", name, "\" (", t.dtype, " ", shape_text(t.shape),
                                  ") is not GPT-2's masked_bias: expected one float, -1e4 or -inf"));
  } else {
    const bool square = t.shape.size() == 4 && t.shape[0] == 1 && t.shape[1] == 1 && t.shape[2] == t.shape[3];
    bool tril = square && (is_float || t.dtype == "BOOL" || t.dtype == "U8");
    if (tril) {
      tril = is_causal_tril(values(), t.shape[3]);
    }
    if (!tril)
      wrong.push_back(
          detail::cat("tensor \"", name, "\" (", t.dtype, " ", shape_text(t.shape),
                      ") is not GPT-2's causal mask: expected (1, 1, P, P) ones on and below the diagonal"));
  }
  ++seen[m[1]];
  return true;
}

void gpt2_buffer_notes(const std::map<std::string, int>& seen, std::vector<std::string>& notes) {
  if (seen.count("bias"))
    notes.push_back(detail::cat(seen.at("bias"),
                                " \"attn.bias\" buffers are GPT-2's causal mask (lower-triangular ones): qkv masks "
                                "causally itself, ignored"));
  if (seen.count("masked_bias"))
    notes.push_back(detail::cat(seen.at("masked_bias"),
                                " \"attn.masked_bias\" buffers hold the score GPT-2 gives masked positions (-1e4 or "
                                "-inf, zero after softmax either way): ignored"));
}

std::string gpt2_untied_head(const std::string& head, const std::string& wte) {
  return detail::cat("tensor \"", head, "\" differs from \"", wte,
                     "\": GPT-2 ties its head to the token embedding, and qkv imports it tied; a file whose head is "
                     "its own weight is not a GPT-2 qkv can import");
}

std::string nanogpt_untied_head() {
  return "tensor \"lm_head.weight\" differs from \"transformer.wte.weight\": the file's head is not tied to the "
         "embedding; build the model with tie_head = false";
}

std::string gpt2_tied_head_note(const std::string& head, const std::string& wte) {
  return detail::cat("\"", head, "\" equals \"", wte, "\" (the tied head): kept once, as tok_emb.weight");
}

}  // namespace qkv::io
