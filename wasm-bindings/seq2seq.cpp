// Seq2Seq for JS.
#include "qkv/seq2seq.h"

#include "model.h"

namespace qkv::js {
namespace {

class JsSeq2Seq : public JsModel<JsSeq2Seq, qkv::Seq2Seq, qkv::Seq2SeqConfig> {
 public:
  static constexpr const char* kName = "Seq2Seq";
  using JsModel::JsModel;

  val train_step(val src, val tgt_in, val tgt_out, int batch, int src_len, int tgt_len) {
    return run([&] {
      return step_result(m_->train_step(int32_array(src, "src"), int32_array(tgt_in, "tgtIn"),
                                        int32_array(tgt_out, "tgtOut"), batch, src_len, tgt_len));
    });
  }
  val evaluate(val src, val tgt_in, val tgt_out, int batch, int src_len, int tgt_len) {
    return run([&] {
      return to_js(m_->evaluate(int32_array(src, "src"), int32_array(tgt_in, "tgtIn"), int32_array(tgt_out, "tgtOut"),
                                batch, src_len, tgt_len));
    });
  }
  val logits(val src, val tgt_in, int batch, int src_len, int tgt_len) {
    return run([&] {
      return to_js(m_->logits(int32_array(src, "src"), int32_array(tgt_in, "tgtIn"), batch, src_len, tgt_len));
    });
  }
  // options: { bos, eos, maxTokens, beamWidth, lengthPenalty, useCache }, types checked by the package.
  val generate(val src, int batch, int src_len, val options) {
    return run([&] {
      qkv::DecodeOptions d;
      d.bos = options["bos"].as<int>();
      d.eos = options["eos"].as<int>();
      d.max_len = options["maxTokens"].as<int>();
      d.beam_width = options["beamWidth"].as<int>();
      d.length_penalty = options["lengthPenalty"].as<float>();
      d.use_cache = options["useCache"].as<bool>();
      return to_js(m_->generate(int32_array(src, "src"), batch, src_len, d).tokens);
    });
  }
  val attention(std::string kind, int layer) const {
    return guarded([&] { return to_js(m_->attention(attention_kind(kind), layer)); });
  }
};

}  // namespace
}  // namespace qkv::js

using namespace qkv::js;

EMSCRIPTEN_BINDINGS(qkv_seq2seq) {
  model_class<JsSeq2Seq>("Seq2Seq")
      .function("trainStep", &JsSeq2Seq::train_step)
      .function("evaluate", &JsSeq2Seq::evaluate)
      .function("logits", &JsSeq2Seq::logits)
      .function("generate", &JsSeq2Seq::generate)
      .function("attention", &JsSeq2Seq::attention);
}
