// The other way round from `qkv import`: qkv checkpoints for tests/fixtures/qkv_to_torch.py to load into
// the PyTorch classes they came from.
//
//   qkv_import_trace FIXTURES_DIR OUT_DIR
//
// For each case of FIXTURES_DIR (tests/fixtures/import): import the state dict, train it 5 steps in qkv on
// the case's batch (so the weights are qkv's own, not PyTorch's), save OUT_DIR/<case>.safetensors (a qkv
// checkpoint, without optimizer state) and OUT_DIR/<case>.json (qkv's logits on the batch after training).
// Seed 004 and nanoGPT without biases are not trained: their PyTorch classes cannot hold what training the
// expanded projections or qkv's LayerNorm biases would make (README, "Importing PyTorch models").
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "qkv/classifier.h"
#include "qkv/config.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"

namespace {

std::vector<int32_t> ids(const qkv::SafetensorsFile& f, const std::string& name) {
  const auto v = f.ints(name);
  return {v.begin(), v.end()};
}
int dim(const qkv::SafetensorsFile& f, const std::string& name, size_t d) {
  return static_cast<int>(f.at(name).shape[d]);
}

void write_json(const std::string& path, const std::vector<float>& logits) {
  std::ofstream out(path);
  out.precision(9);  // every float back exactly
  out << "{\"logits\": [";
  for (size_t i = 0; i < logits.size(); ++i) out << (i ? "," : "") << logits[i];
  out << "]}\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: qkv_import_trace FIXTURES_DIR OUT_DIR\n");
    return 2;
  }
  const std::string in = argv[1], out = argv[2];
  const struct {
    const char* name;
    int heads;
    bool train;
  } cases[] = {{"seed000_encoder", 2, true},      {"seed002_transformer", 4, true},    {"seed003_classifier", 4, true},
               {"seed004_transformer", 0, false}, {"torch_seq2seq_tutorial", 4, true}, {"nanogpt_bias", 4, true},
               {"nanogpt_nobias", 4, false}};
  try {
    for (const auto& c : cases) {
      std::ifstream file(in + "/" + c.name + ".safetensors", std::ios::binary);
      const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
      qkv::ImportOptions o;
      o.heads = c.heads;
      const qkv::ImportedWeights r = qkv::import_weights(bytes, o);
      const auto io = qkv::read_safetensors(in + "/" + c.name + ".io.safetensors");
      qkv::OptimizerConfig opt;
      opt.kind = qkv::OptimizerKind::Adam;
      opt.lr = 1e-2f;
      opt.weight_decay = 0.f;
      opt.grad_clip = 0.f;
      const int steps = c.train ? 5 : 0;
      std::vector<float> logits;
      std::vector<uint8_t> saved;
      if (r.kind == "seq2seq") {
        qkv::Seq2Seq m(qkv::seq2seq_config_from_json(r.config_json), opt);
        m.load_weights(r.weights);
        const auto src = ids(io, "input.src"), tgt_in = ids(io, "input.tgt_in");
        const int B = dim(io, "input.src", 0), S = dim(io, "input.src", 1), T = dim(io, "input.tgt_in", 1);
        std::vector<int32_t> tgt_out = io.contains("input.tgt_out") ? ids(io, "input.tgt_out") : tgt_in;
        for (int s = 0; s < steps; ++s) m.train_step(src, tgt_in, tgt_out, B, S, T);
        logits = m.logits(src, tgt_in, B, S, T);
        saved = m.save(false);
      } else if (r.kind == "classifier") {
        qkv::Classifier m(qkv::classifier_config_from_json(r.config_json), opt);
        m.load_weights(r.weights);
        const auto x = ids(io, "input.ids"), y = ids(io, "input.labels");
        const int B = dim(io, "input.ids", 0), T = dim(io, "input.ids", 1);
        for (int s = 0; s < steps; ++s) m.train_step(x, y, B, T);
        logits = m.logits(x, B, T);
        saved = m.save(false);
      } else {
        qkv::LanguageModel m(qkv::language_model_config_from_json(r.config_json), opt);
        m.load_weights(r.weights);
        const auto x = ids(io, "input.ids"), y = ids(io, "input.targets");
        const int B = dim(io, "input.ids", 0), T = dim(io, "input.ids", 1);
        for (int s = 0; s < steps; ++s) m.train_step(x, y, B, T);
        logits = m.logits(x, B, T);
        saved = m.save(false);
      }
      std::ofstream(out + "/" + c.name + ".safetensors", std::ios::binary)
          .write(reinterpret_cast<const char*>(saved.data()), static_cast<std::streamsize>(saved.size()));
      write_json(out + "/" + c.name + ".json", logits);
      std::printf("%-24s %s, %d qkv training steps\n", c.name, r.kind.c_str(), steps);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv_import_trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
