// State dicts in their authors' names, mapped onto qkv's parameters (io/import.h; README, "Importing
// PyTorch models"). Each format is a table: a regex over qkv's parameter name, the file's tensor(s) it is
// built from (with $1 for the layer index; alternatives tried in order) and the operation that builds it.
#include "io/import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <utility>

#include "io/checkpoint.h"
#include "io/import_buffers.h"
#include "nn/parameters.h"
#include "qkv/classifier.h"
#include "qkv/config.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"

namespace qkv::io {
namespace {

using nlohmann::json;

const char* const kFormats = "qkv, torch, nanogpt, seed000, seed002, seed003, seed004, gpt2";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

struct Rule {
  std::regex qkv;
  std::vector<std::vector<std::string>> parts;  // per source tensor: alternative names ($1 = layer index)
  Op op = Op::Copy;
};

Rule rule(const std::string& qkv, std::vector<std::vector<std::string>> parts, Op op = Op::Copy) {
  return {std::regex(qkv), std::move(parts), op};
}

// The four attention parameters at qkv prefix `q` (a regex) from source prefix `s`, in one style.
enum class Attn { Torch, W, Gpt, Conv1D, Seed004 };
void attention(std::vector<Rule>& r, const std::string& q, const std::string& s, Attn style) {
  switch (style) {
    case Attn::Torch: r.push_back(rule(q + R"(\.(.+))", {{s + ".$2"}})); break;
    case Attn::W:
      r.push_back(
          rule(q + R"(\.in_proj_weight)", {{s + ".W_q.weight"}, {s + ".W_k.weight"}, {s + ".W_v.weight"}}, Op::Stack3));
      r.push_back(rule(q + R"(\.in_proj_bias)", {{s + ".W_q.bias"}, {s + ".W_k.bias"}, {s + ".W_v.bias"}}, Op::Stack3));
      r.push_back(rule(q + R"(\.out_proj\.(weight|bias))", {{s + ".W_o.$2"}}));
      break;
    case Attn::Gpt:
      r.push_back(rule(q + R"(\.in_proj_(weight|bias))", {{s + ".c_attn.$2"}}));
      r.push_back(rule(q + R"(\.out_proj\.(weight|bias))", {{s + ".c_proj.$2"}}));
      break;
    case Attn::Conv1D:  // GPT-2's c_attn (C, 3C) = [W_q; W_k; W_v]^T and c_proj (C, C), stored [in, out]
      r.push_back(rule(q + R"(\.in_proj_weight)", {{s + ".c_attn.weight"}}, Op::Transpose));
      r.push_back(rule(q + R"(\.in_proj_bias)", {{s + ".c_attn.bias"}}));
      r.push_back(rule(q + R"(\.out_proj\.weight)", {{s + ".c_proj.weight"}}, Op::Transpose));
      r.push_back(rule(q + R"(\.out_proj\.bias)", {{s + ".c_proj.bias"}}));
      break;
    case Attn::Seed004:
      r.push_back(rule(q + R"(\.in_proj_weight)",
                       {{s + ".queries.weight"}, {s + ".keys.weight"}, {s + ".values.weight"}}, Op::Expand3));
      r.push_back(rule(q + R"(\.in_proj_bias)", {}, Op::Zeros));
      r.push_back(rule(q + R"(\.out_proj\.(weight|bias))", {{s + ".fc_out.$2"}}));
      break;
  }
}

// The table of a format for a model kind. Layer prefixes capture the index as $1.
std::vector<Rule> rules_for(const std::string& format, const std::string& kind) {
  std::vector<Rule> r;
  const std::string enc = R"(encoder\.layers\.(\d+))", dec = R"(decoder\.layers\.(\d+))", lm = R"(layers\.(\d+))";
  if (format == "torch") {
    // nn.Transformer / nn.TransformerEncoder names are qkv's; "transformer." was stripped on reading.
    r.push_back(rule(R"((src|tgt)_tok_emb\.weight)", {{"$1_tok_emb.weight", "$1_tok_emb.embedding.weight"}}));
    if (kind == "classifier") r.push_back(rule(R"(encoder\.(.+))", {{"encoder.$1", "$1"}}));
    if (kind == "language_model") {
      r.push_back(rule(R"(layers\.(.+))", {{"layers.$1", "encoder.layers.$1"}}));
      r.push_back(rule(R"(norm\.(.+))", {{"norm.$1", "encoder.norm.$1"}}));
    }
    r.push_back(rule(R"((.+))", {{"$1"}}));
  } else if (format == "nanogpt") {
    r.push_back(rule(R"(tok_emb\.weight)", {{"transformer.wte.weight", "lm_head.weight"}}));
    r.push_back(rule(R"(lm_head\.weight)", {{"lm_head.weight"}}));
    r.push_back(rule(R"(pos_emb\.weight)", {{"transformer.wpe.weight"}}));
    attention(r, lm + R"(\.self_attn)", "transformer.h.$1.attn", Attn::Gpt);
    r.push_back(rule(lm + R"(\.norm1\.weight)", {{"transformer.h.$1.ln_1.weight"}}));
    r.push_back(rule(lm + R"(\.norm1\.bias)", {{"transformer.h.$1.ln_1.bias"}}, Op::CopyOrZeros));
    r.push_back(rule(lm + R"(\.norm2\.weight)", {{"transformer.h.$1.ln_2.weight"}}));
    r.push_back(rule(lm + R"(\.norm2\.bias)", {{"transformer.h.$1.ln_2.bias"}}, Op::CopyOrZeros));
    r.push_back(rule(lm + R"(\.linear1\.(weight|bias))", {{"transformer.h.$1.mlp.c_fc.$2"}}));
    r.push_back(rule(lm + R"(\.linear2\.(weight|bias))", {{"transformer.h.$1.mlp.c_proj.$2"}}));
    r.push_back(rule(R"(norm\.weight)", {{"transformer.ln_f.weight"}}));
    r.push_back(rule(R"(norm\.bias)", {{"transformer.ln_f.bias"}}, Op::CopyOrZeros));
  } else if (format == "gpt2") {
    // Hugging Face's GPT2Model / GPT2LMHeadModel, "transformer." dropped on reading (normalize). The head is
    // tied (checked below when the file keeps lm_head.weight); every Conv1D weight is transposed.
    r.push_back(rule(R"(tok_emb\.weight)", {{"wte.weight"}}));
    r.push_back(rule(R"(pos_emb\.weight)", {{"wpe.weight"}}));
    attention(r, lm + R"(\.self_attn)", "h.$1.attn", Attn::Conv1D);
    r.push_back(rule(lm + R"(\.norm1\.(weight|bias))", {{"h.$1.ln_1.$2"}}));
    r.push_back(rule(lm + R"(\.norm2\.(weight|bias))", {{"h.$1.ln_2.$2"}}));
    r.push_back(rule(lm + R"(\.linear1\.weight)", {{"h.$1.mlp.c_fc.weight"}}, Op::Transpose));
    r.push_back(rule(lm + R"(\.linear1\.bias)", {{"h.$1.mlp.c_fc.bias"}}));
    r.push_back(rule(lm + R"(\.linear2\.weight)", {{"h.$1.mlp.c_proj.weight"}}, Op::Transpose));
    r.push_back(rule(lm + R"(\.linear2\.bias)", {{"h.$1.mlp.c_proj.bias"}}));
    r.push_back(rule(R"(norm\.(weight|bias))", {{"ln_f.$1"}}));
  } else if (format == "seed000" || format == "seed003") {
    const bool s3 = format == "seed003";
    r.push_back(rule(R"(tok_emb\.weight)", {{s3 ? "encoder.embedding.embedding.weight" : "encoder.embedding.weight"}}));
    attention(r, enc + R"(\.self_attn)", s3 ? "encoder.layers.$1.attn" : "encoder.layers.$1.self_attn", Attn::W);
    r.push_back(rule(enc + R"(\.linear1\.(weight|bias))", {{"encoder.layers.$1.ff.net.0.$2"}}));
    r.push_back(rule(enc + R"(\.linear2\.(weight|bias))", {{"encoder.layers.$1.ff.net.3.$2"}}));
    r.push_back(rule(R"((.+))", {{"$1"}}));  // norm1, norm2, encoder.norm, classifier.*: the same names
  } else if (format == "seed002") {
    r.push_back(rule(R"(src_tok_emb\.weight)", {{"encoder_embedding.weight"}}));
    r.push_back(rule(R"(tgt_tok_emb\.weight)", {{"decoder_embedding.weight"}}));
    attention(r, enc + R"(\.self_attn)", "encoder_layers.$1.self_attn", Attn::W);
    attention(r, dec + R"(\.self_attn)", "decoder_layers.$1.self_attn", Attn::W);
    attention(r, dec + R"(\.multihead_attn)", "decoder_layers.$1.cross_attn", Attn::W);
    for (const std::string side : {"encoder", "decoder"}) {
      const std::string q = side + R"(\.layers\.(\d+))", s = side + "_layers.$1";
      r.push_back(rule(q + R"(\.linear1\.(weight|bias))", {{s + ".feed_forward.fc1.$2"}}));
      r.push_back(rule(q + R"(\.linear2\.(weight|bias))", {{s + ".feed_forward.fc2.$2"}}));
      r.push_back(rule(q + R"(\.(norm\d)\.(weight|bias))", {{s + ".$2.$3"}}));
    }
    r.push_back(rule(R"(generator\.(weight|bias))", {{"fc.$1"}}));
  } else if (format == "seed004") {
    for (const std::string side : {"src", "tgt"}) {
      const std::string s = side == "src" ? "encoder" : "decoder";
      r.push_back(rule(side + R"(_tok_emb\.weight)", {{s + ".word_embedding.weight"}}));
      r.push_back(rule(side + R"(_pos_emb\.weight)", {{s + ".position_embedding.weight"}}));
    }
    attention(r, enc + R"(\.self_attn)", "encoder.layers.$1.attention", Attn::Seed004);
    r.push_back(rule(enc + R"(\.(norm\d)\.(weight|bias))", {{"encoder.layers.$1.$2.$3"}}));
    r.push_back(rule(enc + R"(\.linear1\.(weight|bias))", {{"encoder.layers.$1.feed_forward.0.$2"}}));
    r.push_back(rule(enc + R"(\.linear2\.(weight|bias))", {{"encoder.layers.$1.feed_forward.2.$2"}}));
    // DecoderBlock: attention + norm, then a TransformerBlock whose attention is the cross-attention.
    const std::string tb = "decoder.layers.$1.transformer_block";
    attention(r, dec + R"(\.self_attn)", "decoder.layers.$1.attention", Attn::Seed004);
    attention(r, dec + R"(\.multihead_attn)", tb + ".attention", Attn::Seed004);
    r.push_back(rule(dec + R"(\.norm1\.(weight|bias))", {{"decoder.layers.$1.norm.$2"}}));
    r.push_back(rule(dec + R"(\.norm2\.(weight|bias))", {{tb + ".norm1.$2"}}));
    r.push_back(rule(dec + R"(\.norm3\.(weight|bias))", {{tb + ".norm2.$2"}}));
    r.push_back(rule(dec + R"(\.linear1\.(weight|bias))", {{tb + ".feed_forward.0.$2"}}));
    r.push_back(rule(dec + R"(\.linear2\.(weight|bias))", {{tb + ".feed_forward.2.$2"}}));
    r.push_back(rule(R"(generator\.(weight|bias))", {{"decoder.fc_out.$1"}}));
  } else {
    check(format == "qkv", "import: format \"", format, "\" is unknown: expected one of ", kFormats);
    r.push_back(rule(R"((.+))", {{"$1"}}));
  }
  return r;
}

// The file's tensors under normalized names: wrappers' prefixes dropped ("_orig_mod." of torch.compile,
// "module." of DataParallel), and per format the prefix its own code adds or omits. `original` gives the
// name as the file has it, for messages.
struct Source {
  std::map<std::string, const TensorEntry*> tensors;
  std::map<std::string, std::string> original;
  std::string dropped;  // the prefix normalize dropped from the file's names (gpt2: "transformer."), if any
  const TensorEntry* find(const std::string& n) const {
    const auto it = tensors.find(n);
    return it == tensors.end() ? nullptr : it->second;
  }
  // A missing tensor is named as the file's other names are (GPT2LMHeadModel's "transformer.h.0...").
  std::string name(const std::string& n) const {
    return original.count(n) ? original.at(n) : n == "lm_head.weight" ? n : dropped + n;
  }
};

std::string normalize(std::string n, const std::string& format) {
  for (const char* wrapper : {"_orig_mod.", "module."})
    while (starts_with(n, wrapper)) n = n.substr(std::string(wrapper).size());
  if ((format == "torch" || format == "gpt2") && starts_with(n, "transformer.")) n = n.substr(12);
  if (format == "seed000" && !starts_with(n, "encoder.") && !starts_with(n, "classifier")) n = "encoder." + n;
  return n;
}

Source source_of(const SafetensorsFile& file, const std::string& format) {
  Source s;
  for (const auto& t : file.tensors) {
    const std::string n = normalize(t.name, format);
    s.tensors[n] = &t;
    s.original[n] = t.name;
    if (format == "gpt2" && n != t.name && ends_with(t.name, "transformer." + n)) s.dropped = "transformer.";
  }
  return s;
}

}  // namespace

std::string detect_format(const SafetensorsFile& file) {
  if (file.metadata.count("qkv.model")) return "qkv";
  // Every name is looked at before deciding: 002's decoder has "self_attn.W_q" as 000's encoder does.
  std::set<std::string> seen;
  bool torch = false, any_in_proj = false;
  for (const auto& t : file.tensors) {
    const std::string n = normalize(t.name, "");
    if (ends_with(n, "attention.queries.weight")) seen.insert("seed004");
    if (starts_with(n, "encoder_layers.") || n == "encoder_embedding.weight") seen.insert("seed002");
    if (ends_with(n, ".attn.W_q.weight") || n == "encoder.embedding.embedding.weight") seen.insert("seed003");
    if (ends_with(n, ".self_attn.W_q.weight")) seen.insert("seed000");
    // nanoGPT and GPT-2 share their names; nanoGPT's nn.Linear stores c_attn as (3C, C), GPT-2's Conv1D as
    // (C, 3C). GPT-2's GPT2Model has no "transformer." prefix, which nanoGPT always has.
    if (ends_with(n, ".attn.c_attn.weight"))
      seen.insert(t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] == 3 * t.shape[0] ? "gpt2" : "nanogpt");
    if (n == "wte.weight" || n == "wpe.weight" || n.rfind("h.0.", 0) == 0) seen.insert("gpt2");
    if (n == "transformer.wte.weight") seen.insert("nanogpt");
    any_in_proj |= ends_with(n, ".in_proj_weight");
    torch |= starts_with(n, "transformer.") || ends_with(n, "tok_emb.embedding.weight") || is_position_buffer(n);
  }
  for (const char* f : {"seed004", "seed002", "seed003", "gpt2", "nanogpt", "seed000"})
    if (seen.count(f)) return f;
  if (any_in_proj) return torch ? "torch" : "qkv";
  std::string some;
  for (size_t i = 0; i < file.tensors.size() && i < 6; ++i) some += (i ? ", " : "") + file.tensors[i].name;
  throw Error(detail::cat("import: the file's tensors (", some.empty() ? "none" : some,
                          ", ...) are in no known format: expected one of ", kFormats));
}

std::string kind_of(const std::vector<Target>& targets) {
  for (const auto& t : targets) {
    if (t.name == "generator.weight") return "seq2seq";
    if (starts_with(t.name, "classifier.")) return "classifier";
  }
  return "language_model";
}

std::string WeightPlan::problems() const {
  if (missing.empty() && misshaped.empty() && leftover.empty() && wrong.empty()) return "";
  std::string msg = detail::cat("the file (format ", format, ") does not fit this ", kind, ": ");
  std::vector<std::string> all;
  for (const auto& n : missing) all.push_back("tensor \"" + n + "\" is missing");
  all.insert(all.end(), misshaped.begin(), misshaped.end());
  all.insert(all.end(), wrong.begin(), wrong.end());
  all.insert(all.end(), leftover.begin(), leftover.end());
  // Every problem at once, up to a screenful: a mistyped n_layer of 300000 would otherwise name 3.6 million tensors.
  constexpr size_t kListed = 40;
  for (size_t i = 0; i < std::min(all.size(), kListed); ++i) msg += (i ? "; " : "") + all[i];
  if (all.size() > kListed) msg += detail::cat("; and ", all.size() - kListed, " more (", all.size(), " in all)");
  return msg;
}

WeightPlan plan_weights(const SafetensorsFile& file, const std::string& format, const std::string& kind,
                        const std::vector<Target>& targets, int heads) {
  const std::vector<Rule> rules = rules_for(format, kind);
  const Source src = source_of(file, format);
  WeightPlan plan;
  plan.format = format;
  plan.kind = kind;
  plan.heads = heads;
  std::set<std::string> used;
  std::string expand_note;
  for (const Target& t : targets) {
    std::smatch m;
    const Rule* r = nullptr;
    for (const Rule& candidate : rules)
      if (std::regex_match(t.name, m, candidate.qkv)) {
        r = &candidate;
        break;
      }
    check(r != nullptr, "import: no rule of format ", format, " for \"", t.name, "\"");
    // Each part: the first alternative present, and the shape it must have.
    std::vector<const TensorEntry*> parts;
    std::vector<std::string> names;
    bool complete = true;
    for (const auto& alternatives : r->parts) {
      const TensorEntry* found = nullptr;
      std::string name;
      for (const auto& a : alternatives) {
        name = m.format(a);
        if ((found = src.find(name))) break;
      }
      if (!found) name = m.format(alternatives.front());
      names.push_back(name);
      if (!found) {
        complete = false;
        if (r->op != Op::CopyOrZeros) plan.missing.push_back(src.name(name));
      }
      parts.push_back(found);
    }
    std::vector<int64_t> want = t.shape;
    if (r->op == Op::Stack3) want[0] /= 3;
    if (r->op == Op::Transpose) std::swap(want[0], want[1]);
    if (r->op == Op::Expand3) {
      const int64_t C = t.shape[1], hd = heads > 0 ? C / heads : 0;
      want = {hd, hd};
      if (complete && parts[0]->shape.size() == 2 && parts[0]->shape[0] != hd && parts[0]->shape[0] > 0 &&
          C % parts[0]->shape[0] == 0) {
        plan.wrong.push_back(detail::cat("tensor \"", src.name(names[0]), "\" is a per-head projection of ",
                                         parts[0]->shape[0], " x ", parts[0]->shape[0],
                                         ", so the model needs heads = ", C / parts[0]->shape[0], ", not ", heads));
        complete = false;
      }
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!parts[i]) continue;
      used.insert(names[i]);
      if (parts[i]->shape != want) {
        plan.misshaped.push_back(detail::cat("tensor \"", src.name(names[i]), "\" has shape ",
                                             shape_text(parts[i]->shape), ", expected ", shape_text(want)));
        complete = false;
      } else if (parts[i]->dtype != "F32" && parts[i]->dtype != "F16" && parts[i]->dtype != "BF16" &&
                 parts[i]->dtype != "F64") {
        plan.wrong.push_back(detail::cat("tensor \"", src.name(names[i]), "\" has dtype ", parts[i]->dtype,
                                         ", expected a floating-point dtype (F32, F16, BF16 or F64)"));
        complete = false;
      }
    }
    if (!complete && !(r->op == Op::CopyOrZeros && parts[0] == nullptr)) continue;
    ParamPlan p{t.name, t.shape, r->op, {}};
    for (const TensorEntry* part : parts)
      if (part) p.parts.push_back(part->name);
    if (p.op == Op::CopyOrZeros && p.parts.empty()) p.op = Op::Zeros;
    if (p.op == Op::Expand3) {
      const int64_t C = t.shape[1], hd = C / heads, H = C / hd;
      expand_note = detail::cat(
          "the per-head q/k/v projections (", hd, " x ", hd, ", shared by the ", H,
          " heads, no bias) are expanded into block-diagonal in_proj_weight (zero in_proj_bias), and W_q is scaled by "
          "sqrt(head_dim / embed_size) = ",
          static_cast<float>(std::sqrt(static_cast<double>(hd) / static_cast<double>(C))),
          " so that qkv's 1/sqrt(head_dim) gives the seed's 1/sqrt(embed_size): exact for inference; training the "
          "expanded weights updates each head's block (and the zeros around them) on its own, where the seed trains "
          "one block shared by all heads");
    }
    plan.params.push_back(std::move(p));
  }
  // seed 004's note once, however many attention blocks were expanded (all alike).
  if (!expand_note.empty()) plan.notes.push_back(expand_note);
  for (const auto& t : targets)
    if (t.name == "tok_emb.weight" || t.name == "src_tok_emb.weight") {
      plan.C = t.shape[1];
      break;
    }
  // What is left: buffers qkv computes itself and a tied head's copy of the embedding are checked by value
  // (check_values); anything else is a tensor this model has no place for.
  for (const auto& [n, t] : src.tensors) {
    if (used.count(n)) continue;
    const bool by_value = is_position_buffer(n) || (format == "nanogpt" && is_causal_mask_buffer(n, *t)) ||
                          (format == "gpt2" && (is_gpt2_buffer(n) || n == "lm_head.weight")) ||
                          (format == "nanogpt" && n == "lm_head.weight" && used.count("transformer.wte.weight"));
    if (by_value) {
      plan.checks.push_back(t->name);
      const char* wte = format == "gpt2" ? "wte.weight" : "transformer.wte.weight";
      if (n == "lm_head.weight" && src.find(wte)) {
        plan.tied_head = t->name;
        plan.tied_to = src.find(wte)->name;
        plan.head_differs = format == "gpt2" ? gpt2_untied_head(src.name(n), src.name(wte)) : nanogpt_untied_head();
        plan.head_note = format == "gpt2" ? gpt2_tied_head_note(src.name(n), src.name(wte)) : "";
      }
      continue;
    }
    if (starts_with(n, "optimizer.m.") || starts_with(n, "optimizer.v.")) continue;  // a qkv checkpoint's moments
    plan.leftover.push_back(detail::cat("tensor \"", src.name(n), "\" is not a parameter of this model"));
  }
  return plan;
}

void check_values(const SafetensorsFile& file, WeightPlan& plan) {
  const Source src = source_of(file, plan.format);
  const std::string& format = plan.format;
  std::vector<std::string>& wrong = plan.wrong;
  const std::set<std::string> wanted(plan.checks.begin(), plan.checks.end());
  for (const auto& [n, t] : src.tensors) {
    if (!wanted.count(t->name)) continue;
    if (is_position_buffer(n)) {
      const std::string problem = check_position_buffer(file, *t, src.name(n), plan.C);
      if (!problem.empty())
        wrong.push_back(problem);
      else
        plan.notes.push_back(detail::cat("\"", src.name(n), "\" ", shape_text(t->shape),
                                         " matches qkv's sinusoidal position table: not needed, ignored"));
      continue;
    }
    if (format == "nanogpt" && is_causal_mask_buffer(n, *t)) {
      if (!is_causal_tril(file.floats(t->name), t->shape[3]))
        wrong.push_back(detail::cat("tensor \"", src.name(n), "\" is not nanoGPT's causal mask"));
      continue;
    }
    if (format == "gpt2" && gpt2_buffer(file, n, *t, src.name(n), wrong, plan.buffers)) continue;
    if (format == "gpt2" && n == "lm_head.weight") {
      const TensorEntry* wte = src.find("wte.weight");
      if (wte && (t->shape != wte->shape || file.floats(t->name) != file.floats(wte->name)))
        wrong.push_back(plan.head_differs);
      else if (wte)
        plan.notes.push_back(plan.head_note);
      continue;
    }
    if (format == "nanogpt" && n == "lm_head.weight") {
      if (file.floats(t->name) != file.floats(src.tensors.at("transformer.wte.weight")->name))
        wrong.push_back(plan.head_differs);
      continue;
    }
  }
}

std::vector<float> build_param(const SafetensorsFile& file, const ParamPlan& p, int heads) {
  int64_t numel = 1;
  for (int64_t d : p.shape) numel *= d;
  std::vector<float> v(static_cast<size_t>(numel), 0.f);
  if (p.op == Op::Copy || (p.op == Op::CopyOrZeros && !p.parts.empty())) {
    v = file.floats(p.parts[0]);
  } else if (p.op == Op::Transpose) {
    // w: (in, out) as stored; v: (out, in) = p.shape
    const auto w = file.floats(p.parts[0]);
    const int64_t out_dim = p.shape[0], in_dim = p.shape[1];
    for (int64_t i = 0; i < in_dim; ++i)
      for (int64_t o = 0; o < out_dim; ++o) v[o * in_dim + i] = w[i * out_dim + o];
  } else if (p.op == Op::Stack3) {
    size_t at = 0;
    for (const std::string& part : p.parts)
      for (float x : file.floats(part)) v[at++] = x;
  } else if (p.op == Op::Expand3) {
    const int64_t C = p.shape[1], hd = C / heads, H = C / hd;
    const float scale = static_cast<float>(std::sqrt(static_cast<double>(hd) / static_cast<double>(C)));
    for (int64_t q = 0; q < 3; ++q) {
      const auto w = file.floats(p.parts[q]);
      const float s = q == 0 ? scale : 1.f;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < hd; ++i)
          for (int64_t j = 0; j < hd; ++j) v[((q * C) + h * hd + i) * C + h * hd + j] = s * w[i * hd + j];
    }
  }
  return v;
}

SafetensorsFile map_weights(const SafetensorsFile& file, const std::string& format, const std::string& kind,
                            const std::vector<Target>& targets, int heads, std::vector<std::string>* notes) {
  WeightPlan plan = plan_weights(file, format, kind, targets, heads);
  check_values(file, plan);
  gpt2_buffer_notes(plan.buffers, plan.notes);
  if (notes) notes->insert(notes->end(), plan.notes.begin(), plan.notes.end());
  const std::string problems = plan.problems();
  if (!problems.empty()) throw Error(problems);
  SafetensorsFile out;
  for (const ParamPlan& p : plan.params) {
    const std::vector<float> v = build_param(file, p, heads);
    TensorEntry e{p.name, "F32", p.shape, {}};
    e.bytes.resize(v.size() * sizeof(float));
    std::memcpy(e.bytes.data(), v.data(), e.bytes.size());
    out.tensors.push_back(std::move(e));
  }
  return out;
}

}  // namespace qkv::io

// ---------------------------------------------------------------------------------------------
// The public side: a model's config from the shapes, then its weights under qkv's names.
// ---------------------------------------------------------------------------------------------

namespace qkv {
namespace {

using nlohmann::json;

struct Shapes {
  io::Source src;
  const std::vector<int64_t>* get(const std::string& n) const {
    const TensorEntry* t = src.find(n);
    return t ? &t->shape : nullptr;
  }
  bool has(const std::string& n) const { return src.find(n) != nullptr; }
  int64_t dim(const std::string& n, size_t d) const {
    const auto* s = get(n);
    check(s != nullptr && s->size() > d, "import: tensor \"", n, "\" is missing or has no dimension ", d,
          ": cannot tell the model's shape from the file");
    return (*s)[d];
  }
  int64_t dim_any(const std::vector<std::string>& names, size_t d) const {
    for (const auto& n : names)
      if (has(n)) return dim(n, d);
    return dim(names.front(), d);
  }
  // 1 + the largest N of keys "<prefix>N.", 0 when none.
  int count(const std::string& prefix) const {
    int n = 0;
    for (const auto& [name, t] : src.tensors) {
      if (!io::starts_with(name, prefix)) continue;
      const std::string rest = name.substr(prefix.size());
      const size_t dot = rest.find('.');
      if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789") != dot) continue;
      n = std::max(n, std::stoi(rest.substr(0, dot)) + 1);
    }
    return n;
  }
  // Rows of a position buffer, 0 when there is none.
  int64_t position_rows() const {
    for (const auto& [name, t] : src.tensors)
      if (io::is_position_buffer(name) && t->shape.size() >= 2)
        return t->shape.size() == 3 && t->shape[0] == 1 ? t->shape[1] : t->shape[0];
    return 0;
  }
};

// partial: for load_state, where the model's config supplies what the file cannot: 0, dropped later.
int heads_or(const ImportOptions& o, const std::string& format, bool partial) {
  if (partial) return 0;
  check(o.heads > 0, "import: heads = ", o.heads, ": a ", format,
        " file's shapes cannot tell the number of attention heads; give it (qkv import --heads N, "
        "ImportOptions::heads)");
  return o.heads;
}

int64_t context_or(const ImportOptions& o, int64_t from_file, const std::string& format, bool partial) {
  if (o.context > 0) return o.context;
  if (partial) return from_file;
  check(from_file > 0, "import: context = 0: a ", format,
        " file without a position table cannot tell the longest sequence; give it (qkv import --context N, "
        "ImportOptions::context)");
  return from_file;
}

json config_of(const std::string& format, const Shapes& s, const ImportOptions& o, std::string& kind,
               bool partial = false) {
  json c;
  // GPT-2's activation is "gelu_new", GELU's tanh approximation (qkv's "gelu_tanh"); nanoGPT's is nn.GELU's erf.
  const bool gpt = format == "nanogpt" || format == "gpt2";
  const std::string act = !o.activation.empty() ? o.activation
                          : format == "gpt2"    ? "gelu_tanh"
                          : format == "nanogpt" ? "gelu"
                                                : "relu";
  const std::string norm = o.norm.empty() ? (gpt ? "pre" : "post") : o.norm;
  c["activation"] = act;
  c["norm"] = norm;
  c["dropout"] = 0.0;
  if (format == "nanogpt") {
    kind = "language_model";
    const int64_t C = s.dim_any({"transformer.wte.weight", "lm_head.weight"}, 1);
    c["vocab_size"] = s.dim_any({"transformer.wte.weight", "lm_head.weight"}, 0);
    c["context"] =
        context_or(o, s.has("transformer.wpe.weight") ? s.dim("transformer.wpe.weight", 0) : 0, format, partial);
    c["d_model"] = C;
    c["heads"] = heads_or(o, format, partial);
    c["layers"] = s.count("transformer.h.");
    c["d_ff"] = s.dim("transformer.h.0.mlp.c_fc.weight", 0);
    c["bias"] = s.has("transformer.h.0.attn.c_attn.bias");
    c["positions"] = "learned";
    c["scale_embedding"] = false;
    c["final_norm"] = true;
    const bool both = s.has("transformer.wte.weight") && s.has("lm_head.weight");
    c["tie_head"] = !both || s.src.find("transformer.wte.weight")->bytes == s.src.find("lm_head.weight")->bytes;
    return c;
  }
  if (format == "gpt2") {
    // Every Hub GPT-2 (gpt2, distilgpt2, gpt2-medium/large/xl): pre-LN, learned positions, biases, a final
    // LayerNorm, the head tied to wte; c_fc is (C, d_ff), stored [in, out].
    kind = "language_model";
    c["vocab_size"] = s.dim("wte.weight", 0);
    c["d_model"] = s.dim("wte.weight", 1);
    c["context"] = context_or(o, s.has("wpe.weight") ? s.dim("wpe.weight", 0) : 0, format, partial);
    c["heads"] = heads_or(o, format, partial);
    c["layers"] = s.count("h.");
    c["d_ff"] = s.dim("h.0.mlp.c_fc.weight", 1);
    c["bias"] = true;
    c["positions"] = "learned";
    c["scale_embedding"] = false;
    c["final_norm"] = true;
    c["tie_head"] = true;
    return c;
  }
  if (format == "seed000" || format == "seed003") {
    kind = "classifier";
    const bool s3 = format == "seed003";
    const std::string emb = s3 ? "encoder.embedding.embedding.weight" : "encoder.embedding.weight";
    c["vocab_size"] = s.dim(emb, 0);
    c["d_model"] = s.dim(emb, 1);
    c["context"] = context_or(o, s.position_rows(), format, partial);
    c["heads"] = heads_or(o, format, partial);
    c["layers"] = s.count("encoder.layers.");
    c["d_ff"] = s.dim("encoder.layers.0.ff.net.0.weight", 0);
    const bool mlp = s.has("classifier.0.weight");
    c["classes"] = s.dim(mlp ? "classifier.3.weight" : "classifier.weight", 0);
    c["head"] = mlp ? "mlp" : "linear";
    c["pooling"] = "first";
    c["positions"] = "sinusoidal";
    c["scale_embedding"] = s3;  // 003's InputEmbedding multiplies by sqrt(d_model); 000's does not
    c["final_norm"] = s.has("encoder.norm.weight");
    c["pad_id"] = o.pad_id;
    return c;
  }
  if (format == "seed002" || format == "seed004") {
    kind = "seq2seq";
    const bool s4 = format == "seed004";
    const std::string se = s4 ? "encoder.word_embedding.weight" : "encoder_embedding.weight";
    const std::string te = s4 ? "decoder.word_embedding.weight" : "decoder_embedding.weight";
    const int64_t C = s.dim(se, 1);
    c["src_vocab"] = s.dim(se, 0);
    c["tgt_vocab"] = s.dim(te, 0);
    c["d_model"] = C;
    c["encoder_layers"] = s.count(s4 ? "encoder.layers." : "encoder_layers.");
    c["decoder_layers"] = s.count(s4 ? "decoder.layers." : "decoder_layers.");
    if (s4) {
      const int64_t hd = s.dim("encoder.layers.0.attention.queries.weight", 0);
      check(hd > 0 && C % hd == 0, "import: seed004 per-head projections of ", hd, " do not divide embed_size ", C);
      check(o.heads == 0 || o.heads == C / hd, "import: heads = ", o.heads, " but the file's per-head projections (",
            hd, " x ", hd, ") make ", C / hd, " heads");
      c["heads"] = C / hd;
      c["context"] = s.dim("encoder.position_embedding.weight", 0);
      c["d_ff"] = s.dim("encoder.layers.0.feed_forward.0.weight", 0);
      c["positions"] = "learned";
    } else {
      c["heads"] = heads_or(o, format, partial);
      c["context"] = context_or(o, s.position_rows(), format, partial);
      c["d_ff"] = s.dim("encoder_layers.0.feed_forward.fc1.weight", 0);
      c["positions"] = "sinusoidal";
    }
    c["scale_embedding"] = false;
    c["final_norm"] = false;
    c["pad_id"] = o.pad_id;
    return c;
  }
  // torch and qkv names (nn.Transformer inside)
  const bool seq2seq = s.count("decoder.layers.") > 0;
  const bool classifier = s.has("classifier.weight") || s.has("classifier.0.weight");
  kind = seq2seq ? "seq2seq" : classifier ? "classifier" : "language_model";
  const std::string layer0 = seq2seq || classifier ? (s.count("encoder.layers.") ? "encoder.layers.0." : "layers.0.")
                                                   : (s.count("layers.") ? "layers.0." : "encoder.layers.0.");
  c["d_model"] = s.dim(layer0 + "self_attn.in_proj_weight", 1);
  c["heads"] = heads_or(o, format, partial);
  c["d_ff"] = s.dim(layer0 + "linear1.weight", 0);
  c["bias"] = s.has(layer0 + "self_attn.in_proj_bias");
  const auto tok = [](const std::string& p) {
    return std::vector<std::string>{p + ".weight", p + ".embedding.weight"};
  };
  const std::string pos = seq2seq ? "src_pos_emb.weight" : "pos_emb.weight";
  c["positions"] = s.has(pos) ? "learned" : "sinusoidal";
  c["context"] = context_or(o, s.has(pos) ? s.dim(pos, 0) : s.position_rows(), format, partial);
  if (seq2seq) {
    c["src_vocab"] = s.dim_any(tok("src_tok_emb"), 0);
    c["tgt_vocab"] = s.dim_any(tok("tgt_tok_emb"), 0);
    c["encoder_layers"] = s.count("encoder.layers.");
    c["decoder_layers"] = s.count("decoder.layers.");
    c["final_norm"] = s.has("encoder.norm.weight");
    c["scale_embedding"] = o.scale_embedding != 0;  // the translation tutorial's TokenEmbedding scales
    c["pad_id"] = o.pad_id;
  } else if (classifier) {
    c["vocab_size"] = s.dim("tok_emb.weight", 0);
    c["layers"] = std::max(s.count("encoder.layers."), s.count("layers."));
    c["final_norm"] = s.has("encoder.norm.weight") || s.has("norm.weight");
    const bool mlp = s.has("classifier.0.weight");
    c["classes"] = s.dim(mlp ? "classifier.3.weight" : "classifier.weight", 0);
    c["head"] = mlp ? "mlp" : "linear";
    c["scale_embedding"] = o.scale_embedding == 1;
    c["pad_id"] = o.pad_id;
  } else {
    c["vocab_size"] = s.dim("tok_emb.weight", 0);
    c["layers"] = std::max(s.count("encoder.layers."), s.count("layers."));
    c["final_norm"] = s.has("encoder.norm.weight") || s.has("norm.weight");
    c["tie_head"] = !s.has("lm_head.weight");
    c["scale_embedding"] = o.scale_embedding == 1;
  }
  return c;
}

}  // namespace

namespace io {

std::string imported_config(const SafetensorsFile& file, const std::string& format, std::string& kind) {
  const Shapes s{source_of(file, format)};
  json c = config_of(format, s, ImportOptions{}, kind, true);
  // Keep what the file and its format fix; leave out what the model's config must supply.
  if (format != "seed004") c.erase("heads");
  if (c.value("positions", "") != "learned" || format == "torch" || format == "qkv") c.erase("context");
  c.erase("dropout");
  c.erase("pad_id");
  // d_ff 0 means 4 * d_model in a model's config: the same width either way (the shapes check it).
  if (c.contains("d_ff") && c.contains("d_model") && c["d_ff"] == 4 * c["d_model"].get<int64_t>()) c.erase("d_ff");
  if (format == "torch" || format == "qkv")
    for (const char* k : {"activation", "norm", "scale_embedding", "pooling"}) c.erase(k);
  if (format == "gpt2") c.erase("activation");  // config.json's activation_function says it, not the weights
  return c.dump();
}

}  // namespace io

namespace {

template <class Model>
std::vector<io::Target> targets_of(Model& m) {
  std::vector<io::Target> t;
  for (const auto& p : m.parameters()) t.push_back({p.name, {p.shape.begin(), p.shape.end()}});
  return t;
}

}  // namespace

std::string detect_format(std::span<const uint8_t> bytes) { return io::detect_format(parse_safetensors(bytes)); }

namespace io {

SafetensorsFile mapped_weights(SafetensorsFile file, const std::string& format, const std::string& kind,
                               const std::string& config_json, std::vector<std::string>* notes) {
  std::vector<io::Target> targets;
  int heads = 0;
  {
    // A model built only for its parameters' names and shapes: no memory at all.
    const nn::Parameters::ForLoading names_only{nn::Parameters::ShapesOnly{}};
    if (kind == "seq2seq") {
      Seq2Seq m(seq2seq_config_from_json(config_json));
      targets = targets_of(m), heads = m.config().heads;
    } else if (kind == "classifier") {
      Classifier m(classifier_config_from_json(config_json));
      targets = targets_of(m), heads = m.config().heads;
    } else {
      check(kind == "language_model", "import: the file holds a \"", kind, "\", which qkv cannot import");
      LanguageModel m(language_model_config_from_json(config_json));
      targets = targets_of(m), heads = m.config().heads;
    }
  }
  // `file`, taken by value, is freed on return: the source's tensors go once mapped, before anything is written.
  return io::map_weights(file, format, kind, targets, heads, notes);
}

ImportedWeights import_into(SafetensorsFile file, const std::string& format, const std::string& kind,
                            const std::string& config_json) {
  ImportedWeights r;
  r.format = format;
  r.kind = kind;
  r.config_json = config_json;
  const SafetensorsFile mapped = mapped_weights(std::move(file), r.format, r.kind, r.config_json, &r.notes);
  // map_weights writes F32: the mapped bytes are the values, written out without another copy.
  std::vector<TensorRef> refs;
  for (const auto& t : mapped.tensors)
    refs.emplace_back(t.name, t.shape,
                      std::span<const float>(reinterpret_cast<const float*>(t.bytes.data()), t.bytes.size() / 4));
  r.weights = serialize_safetensors(refs, {{"qkv.imported_from", r.format}});
  return r;
}

}  // namespace io

namespace io {

std::string import_config(const SafetensorsFile& file, const ImportOptions& o, std::string& format, std::string& kind) {
  format = o.from == "auto" ? io::detect_format(file) : o.from;
  const std::string known = std::string(", ") + io::kFormats + ", ";
  check(known.find(", " + format + ", ") != std::string::npos, "import: format \"", format,
        "\" is unknown: expected one of ", io::kFormats, " (or auto)");
  if (format == "qkv" && file.metadata.count("qkv.model")) {
    kind = file.metadata.at("qkv.model");
    return file.metadata.count("qkv.config") ? file.metadata.at("qkv.config") : "";
  }
  const Shapes s{io::source_of(file, format)};
  return config_of(format, s, o, kind).dump();
}

}  // namespace io

namespace {

// The source is moved into import_into, which frees its tensors once mapped.
ImportedWeights import_parsed(SafetensorsFile file, const ImportOptions& o) {
  std::string format, kind;
  const std::string config = io::import_config(file, o, format, kind);
  return io::import_into(std::move(file), format, kind, config);
}

}  // namespace

ImportedWeights import_weights(std::span<const uint8_t> bytes, const ImportOptions& o) {
  return import_parsed(parse_safetensors(bytes), o);
}

ImportedWeights import_file(const std::string& path, const ImportOptions& o) {
  SafetensorsFile file = read_safetensors(path);  // errors name the path
  try {
    return import_parsed(std::move(file), o);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace qkv
