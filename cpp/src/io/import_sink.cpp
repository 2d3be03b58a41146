// ImportSink (io/import_sink.h): a foreign file's tensors written into a model's parameters as they arrive.
#include "io/import_sink.h"

#include <algorithm>
#include <set>

#include "io/import_buffers.h"
#include "qkv/error.h"

namespace qkv::io {
namespace {

const TensorInfo& info(const SafetensorsHeader& h, const std::string& name) {
  for (const TensorInfo& t : h.tensors)
    if (t.name == name) return t;
  throw Error("import: tensor \"" + name + "\" is not in the header");  // plan_weights names only the file's
}

}  // namespace

SafetensorsFile skeleton(const SafetensorsHeader& h) {
  SafetensorsFile f;
  f.metadata = h.metadata;
  for (const TensorInfo& t : h.tensors) f.tensors.push_back({t.name, t.dtype, t.shape, {}});
  return f;
}

WeightPlan plan_header(const SafetensorsHeader& header, const std::string& format, const std::string& kind,
                       const std::vector<Target>& targets, int heads) {
  WeightPlan plan = plan_weights(skeleton(header), format, kind, targets, heads);
  if (!plan.tied_head.empty() && info(header, plan.tied_head).shape != info(header, plan.tied_to).shape)
    plan.wrong.push_back(plan.head_differs);
  const std::string problems = plan.problems();
  if (!problems.empty()) throw Error(problems);
  return plan;
}

bool can_stream(const WeightPlan& plan) {
  // Each of the file's tensors goes to one place as it passes: none may feed two parameters.
  std::set<std::string> used;
  for (const ParamPlan& p : plan.params) {
    if (p.op == Op::Expand3) return false;
    for (const std::string& part : p.parts)
      if (!used.insert(part).second) return false;
  }
  return true;
}

namespace {
std::vector<std::string> names_of(const SafetensorsHeader& header) {
  std::vector<std::string> names;
  for (const TensorInfo& t : header.tensors) names.push_back(t.name);
  return names;
}
}  // namespace

ImportSink::ImportSink(WeightPlan plan, const SafetensorsHeader& header,
                       const std::map<std::string, std::span<float>>& values)
    : ImportSink(std::move(plan), names_of(header), values) {
  bind(header);
}

ImportSink::ImportSink(WeightPlan plan, const std::vector<std::string>& order,
                       const std::map<std::string, std::span<float>>& values)
    : plan_(std::move(plan)) {
  check(can_stream(plan_),
        "import: this file cannot stream into the model (seed 004's per-head projections, or a "
        "tensor that feeds two parameters): map it whole (import_file)");
  for (const ParamPlan& p : plan_.params) {
    const std::span<float> v = values.at(p.name);
    switch (p.op) {
      case Op::Copy:
      case Op::CopyOrZeros: by_name_[p.parts[0]] = {Act::Write, v.data()}; break;
      case Op::Transpose: by_name_[p.parts[0]] = {Act::Transpose, v.data(), p.shape[1], p.shape[0]}; break;
      case Op::Stack3:  // W_q | W_k | W_v, each a third of the rows
        for (size_t k = 0; k < p.parts.size(); ++k) by_name_[p.parts[k]] = {Act::Write, v.data() + k * (v.size() / 3)};
        break;
      case Op::Zeros: std::fill(v.begin(), v.end(), 0.f); break;
      case Op::Expand3: break;  // refused above
    }
  }
  for (const std::string& c : plan_.checks) by_name_[c].act = Act::Collect;
  if (!plan_.tied_head.empty()) {
    // Whichever of the tied pair comes first writes the embedding; the other is compared with it.
    const auto at = [&](const std::string& n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
    const bool head_first = at(plan_.tied_head) < at(plan_.tied_to);
    float* dst = by_name_.at(plan_.tied_to).dst;
    by_name_[head_first ? plan_.tied_head : plan_.tied_to] = {Act::Write, dst};
    by_name_[head_first ? plan_.tied_to : plan_.tied_head] = {Act::Compare, dst};
  }
}

void ImportSink::bind(const SafetensorsHeader& header, const std::set<std::string>* only) {
  header_ = &header;
  actions_.assign(header.tensors.size(), {});
  collected_.assign(header.tensors.size(), {});
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    const std::string& n = header.tensors[i].name;
    if (only && !only->count(n)) continue;
    if (const auto it = by_name_.find(n); it != by_name_.end()) actions_[i] = it->second;
  }
}

std::span<uint8_t> ImportSink::place(size_t i) {
  const TensorInfo& t = header_->tensors[i];
  if (actions_[i].act != Act::Write || t.dtype != "F32") return {};
  return {reinterpret_cast<uint8_t*>(actions_[i].dst), static_cast<size_t>(t.size())};
}

void ImportSink::take(size_t i, uint64_t offset, std::span<const uint8_t> bytes) {
  const Action& a = actions_[i];
  const TensorInfo& t = header_->tensors[i];
  if (a.act == Act::Skip) return;
  if (a.act == Act::Collect) {
    collected_[i].bytes.insert(collected_[i].bytes.end(), bytes.begin(), bytes.end());
    return;
  }
  // Read into place (place()): any number of bytes, already where they belong.
  if (a.act == Act::Write && reinterpret_cast<const uint8_t*>(a.dst) + offset == bytes.data()) return;
  // Else whole elements (the reader's staging guarantees it): element `first` of the tensor onwards.
  const size_t element = dtype_size(t.dtype), first = static_cast<size_t>(offset / element);
  const size_t n = bytes.size() / element;
  if (a.act == Act::Write) {
    to_floats(t.dtype, bytes, std::span<float>(a.dst + first, n));
    return;
  }
  floats_.resize(n);
  to_floats(t.dtype, bytes, floats_);
  if (a.act == Act::Compare) {
    // Float equality, as check_values compares the two tensors (a NaN differs from itself there too).
    for (size_t k = 0; k < n && !head_differs_; ++k) head_differs_ = !(floats_[k] == a.dst[first + k]);
    return;
  }
  // Transpose: stored w (rows = in, cols = out), element (r, c) -> the parameter's (c, r), rows columns wide.
  int64_t r = static_cast<int64_t>(first) / a.cols, c = static_cast<int64_t>(first) % a.cols;
  for (size_t k = 0; k < n; ++k) {
    a.dst[c * a.rows + r] = floats_[k];
    if (++c == a.cols) c = 0, ++r;
  }
}

void ImportSink::end(size_t i) {
  if (actions_[i].act != Act::Collect) return;
  const TensorInfo& t = header_->tensors[i];
  SafetensorsFile one;
  one.tensors.push_back({t.name, t.dtype, t.shape, std::move(collected_[i].bytes)});
  check_values(one, plan_);
  collected_[i] = {};
}

std::vector<std::string> ImportSink::finish() {
  if (!plan_.tied_head.empty()) {
    if (head_differs_)
      plan_.wrong.push_back(plan_.head_differs);
    else if (!plan_.head_note.empty())
      plan_.notes.push_back(plan_.head_note);
  }
  gpt2_buffer_notes(plan_.buffers, plan_.notes);
  const std::string problems = plan_.problems();
  if (!problems.empty()) throw Error(problems);
  return plan_.notes;
}

}  // namespace qkv::io
