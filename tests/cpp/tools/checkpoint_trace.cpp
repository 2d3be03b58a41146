// Checkpoints across targets: tests/web/native-parity.test.ts checks that a checkpoint saved by the
// native build loads in the WebAssembly build (through the npm package) and gives the same logits, and back.
//
//   qkv_checkpoint_trace write DIR          for each model kind: build a small model, train it a few steps on a
//                                           fixed batch, save DIR/<kind>.safetensors and write DIR/<kind>.json
//                                           (the probe batch and the native logits on it)
//   qkv_checkpoint_trace logits KIND FILE   load FILE (a checkpoint of KIND) and print the logits on KIND's
//                                           probe batch as JSON
//
// Each kind uses non-default choices (untied LM head, pre-LN seq2seq with GELU and label smoothing, mean
// pooling with a linear head) so that the configs, not only the weights, must cross intact.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"

namespace {

using Ids = std::vector<int32_t>;

// The probe batches; training reuses them (with targets), so the saved model has moved off its initial weights.
struct LmProbe {
  static constexpr int B = 2, T = 10, V = 13;
  Ids inputs, targets;
  LmProbe() {
    for (int i = 0; i < B * T; ++i) {
      inputs.push_back((i * 7 + 3) % V);
      targets.push_back((i * 5 + 1) % V);
    }
  }
};

struct Seq2SeqProbe {
  static constexpr int B = 2, S = 6, T = 5, Vs = 11, Vt = 12;
  // Row 1 is shorter: pad (0) at the end of its source and target.
  Ids src = {3, 4, 5, 6, 7, 8, 9, 10, 4, 5, 0, 0};
  Ids tgt_in = {1, 8, 7, 6, 5, 1, 5, 4, 10, 0};
  Ids tgt_out = {8, 7, 6, 5, 2, 5, 4, 10, 2, 0};
};

struct ClassifierProbe {
  static constexpr int B = 3, T = 7, V = 15;
  Ids tokens = {1, 5, 6, 7, 8, 9, 10, 1, 11, 12, 13, 0, 0, 0, 1, 4, 4, 14, 3, 2, 0};
  Ids labels = {0, 2, 1};
};

qkv::LanguageModelConfig lm_config() {
  qkv::LanguageModelConfig c{
      .vocab_size = LmProbe::V, .context = LmProbe::T, .d_model = 24, .heads = 3, .layers = 2, .d_ff = 40, .seed = 5};
  c.tie_head = false;
  c.positions = qkv::Positions::Sinusoidal;
  return c;
}

qkv::Seq2SeqConfig seq2seq_config() {
  qkv::Seq2SeqConfig c{.src_vocab = Seq2SeqProbe::Vs,
                       .tgt_vocab = Seq2SeqProbe::Vt,
                       .context = 8,
                       .d_model = 16,
                       .heads = 2,
                       .encoder_layers = 2,
                       .decoder_layers = 1,
                       .d_ff = 32,
                       .seed = 6};
  c.norm = qkv::NormPosition::Pre;
  c.activation = qkv::Activation::GELU;
  c.label_smoothing = 0.1f;
  return c;
}

qkv::ClassifierConfig classifier_config() {
  qkv::ClassifierConfig c{.vocab_size = ClassifierProbe::V,
                          .context = ClassifierProbe::T,
                          .d_model = 16,
                          .heads = 4,
                          .layers = 2,
                          .d_ff = 24,
                          .classes = 3,
                          .seed = 7};
  c.pooling = qkv::Pooling::Mean;
  c.head = qkv::ClassifierHead::Linear;
  return c;
}

void print_array(std::FILE* f, const char* name, const std::vector<float>& v) {
  std::fprintf(f, "\"%s\": [", name);
  for (size_t i = 0; i < v.size(); ++i) std::fprintf(f, "%s%.9g", i ? ", " : "", static_cast<double>(v[i]));
  std::fprintf(f, "]");
}

void print_array(std::FILE* f, const char* name, const Ids& v) {
  std::fprintf(f, "\"%s\": [", name);
  for (size_t i = 0; i < v.size(); ++i) std::fprintf(f, "%s%d", i ? ", " : "", v[i]);
  std::fprintf(f, "]");
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<float> lm_logits(qkv::LanguageModel& m) {
  const LmProbe p;
  return m.logits(p.inputs, LmProbe::B, LmProbe::T);
}
std::vector<float> seq2seq_logits(qkv::Seq2Seq& m) {
  const Seq2SeqProbe p;
  return m.logits(p.src, p.tgt_in, Seq2SeqProbe::B, Seq2SeqProbe::S, Seq2SeqProbe::T);
}
std::vector<float> classifier_logits(qkv::Classifier& m) {
  const ClassifierProbe p;
  return m.logits(p.tokens, ClassifierProbe::B, ClassifierProbe::T);
}

// DIR/<kind>.json: the probe (the JS test feeds it to predict) and the native logits.
void write_probe(const std::string& dir, const char* kind, const std::vector<std::pair<const char*, Ids>>& arrays,
                 const std::vector<std::pair<const char*, int>>& shape, const std::vector<float>& logits) {
  const std::string path = dir + "/" + kind + ".json";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error("cannot write " + path);
  std::fprintf(f, "{\n  \"kind\": \"%s\",\n", kind);
  for (const auto& [name, value] : shape) std::fprintf(f, "  \"%s\": %d,\n", name, value);
  for (const auto& [name, ids] : arrays) {
    std::fprintf(f, "  ");
    print_array(f, name, ids);
    std::fprintf(f, ",\n");
  }
  std::fprintf(f, "  ");
  print_array(f, "logits", logits);
  std::fprintf(f, "\n}\n");
  std::fclose(f);
}

void write_all(const std::string& dir) {
  {
    const LmProbe p;
    qkv::LanguageModel m(lm_config());
    for (int s = 0; s < 3; ++s) m.train_step(p.inputs, p.targets, LmProbe::B, LmProbe::T);
    m.save_file(dir + "/language_model.safetensors");
    write_probe(dir, "language_model", {{"inputs", p.inputs}, {"targets", p.targets}},
                {{"batch", LmProbe::B}, {"seq", LmProbe::T}}, lm_logits(m));
  }
  {
    const Seq2SeqProbe p;
    qkv::Seq2Seq m(seq2seq_config());
    for (int s = 0; s < 3; ++s)
      m.train_step(p.src, p.tgt_in, p.tgt_out, Seq2SeqProbe::B, Seq2SeqProbe::S, Seq2SeqProbe::T);
    m.save_file(dir + "/seq2seq.safetensors");
    write_probe(dir, "seq2seq", {{"src", p.src}, {"tgtIn", p.tgt_in}, {"tgtOut", p.tgt_out}},
                {{"batch", Seq2SeqProbe::B}}, seq2seq_logits(m));
  }
  {
    const ClassifierProbe p;
    qkv::Classifier m(classifier_config());
    // More steps than the others: a mean-pooled linear head starts with logits near zero.
    for (int s = 0; s < 30; ++s) m.train_step(p.tokens, p.labels, ClassifierProbe::B, ClassifierProbe::T);
    m.save_file(dir + "/classifier.safetensors");
    write_probe(dir, "classifier", {{"tokens", p.tokens}, {"labels", p.labels}},
                {{"batch", ClassifierProbe::B}, {"seq", ClassifierProbe::T}}, classifier_logits(m));
  }
}

void print_logits(const std::string& kind, const std::string& file) {
  const std::vector<uint8_t> bytes = read_file(file);
  std::vector<float> logits;
  if (kind == "language_model") {
    logits = lm_logits(*qkv::LanguageModel::load(bytes));
  } else if (kind == "seq2seq") {
    logits = seq2seq_logits(*qkv::Seq2Seq::load(bytes));
  } else if (kind == "classifier") {
    logits = classifier_logits(*qkv::Classifier::load(bytes));
  } else {
    throw std::runtime_error("unknown kind " + kind + ": expected language_model, seq2seq or classifier");
  }
  std::printf("{");
  print_array(stdout, "logits", logits);
  std::printf("}\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 2 && args[0] == "write") {
      write_all(args[1]);
    } else if (args.size() == 3 && args[0] == "logits") {
      print_logits(args[1], args[2]);
    } else {
      std::fprintf(stderr, "usage: qkv_checkpoint_trace write DIR | logits KIND FILE\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv_checkpoint_trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
