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
                       const std::map<std::string, std::span<float>>& values, const Packed& packed)
    : ImportSink(std::move(plan), names_of(header), values, packed) {
  bind(header);
}

ImportSink::ImportSink(WeightPlan plan, const std::vector<std::string>& order,
                       const std::map<std::string, std::span<float>>& values, const Packed& packed)
    : plan_(std::move(plan)) {
  check(can_stream(plan_),
        "import: this file cannot stream into the model (seed 004's per-head projections, or a "
        "tensor that feeds two parameters): map it whole (import_file)");
  for (const ParamPlan& p : plan_.params) {
    if (const auto it = packed.find(p.name); it != packed.end()) {
      // A kept half-precision matrix: its one tensor copied, or (Conv1D) transposed, into its rows.
      const PackedTarget& t = it->second;
      check((p.op == Op::Copy || p.op == Op::Transpose) && p.parts.size() == 1, "import: ", p.name,
            " cannot be kept packed: it is not one tensor of the file");
      Action a;
      a.act = p.op == Op::Copy ? Act::Write : Act::Transpose;
      a.packed = t.rows.data();
      a.stride = ops::row_stride(t.format, static_cast<int>(t.cols));
      a.format = t.format;
      a.rows = p.op == Op::Copy ? t.n : t.cols;  // Transpose: the stored shape (in, out) = (cols, n)
      a.cols = p.op == Op::Copy ? t.cols : t.n;
      by_name_[p.parts[0]] = a;
      continue;
    }
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
    Action write = by_name_.at(plan_.tied_to), compare = write;  // the embedding's destination, float32 or packed
    write.act = Act::Write;
    compare.act = Act::Compare;
    by_name_[head_first ? plan_.tied_head : plan_.tied_to] = write;
    by_name_[head_first ? plan_.tied_to : plan_.tied_head] = compare;
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

namespace {
// Whether a tensor of `dtype` is a packed parameter's elements as they are (16-bit codes of its format).
bool same_codes(const std::string& dtype, ops::WeightFormat f) {
  return (dtype == "F16" && f == ops::WeightFormat::F16) || (dtype == "BF16" && f == ops::WeightFormat::BF16);
}
}  // namespace

std::span<uint8_t> ImportSink::place(size_t i) {
  const TensorInfo& t = header_->tensors[i];
  const Action& a = actions_[i];
  if (a.act != Act::Write) return {};
  if (a.packed) {
    // Rows without padding (an even width) are the tensor's bytes as they are: read straight into place.
    if (!same_codes(t.dtype, a.format) || a.stride != 2 * static_cast<size_t>(a.cols)) return {};
    return {a.packed, static_cast<size_t>(t.size())};
  }
  if (t.dtype != "F32") return {};
  return {reinterpret_cast<uint8_t*>(a.dst), static_cast<size_t>(t.size())};
}

void ImportSink::take_packed(const Action& a, const TensorInfo& t, size_t first, size_t n,
                             std::span<const uint8_t> bytes) {
  // Element e of the tensor is (r, c) = (e / cols, e % cols) of its stored shape; a Conv1D weight's (r, c) is the
  // parameter's (c, r). Each element is the 2-byte code at byte 2 x column of its row.
  const bool codes = same_codes(t.dtype, a.format);
  if (!codes) {
    floats_.resize(n);
    to_floats(t.dtype, bytes, floats_);
  }
  int64_t r = static_cast<int64_t>(first) / a.cols, c = static_cast<int64_t>(first) % a.cols;
  for (size_t k = 0; k < n; ++k) {
    uint8_t* at = a.act == Act::Transpose ? a.packed + static_cast<size_t>(c) * a.stride + 2 * static_cast<size_t>(r)
                                          : a.packed + static_cast<size_t>(r) * a.stride + 2 * static_cast<size_t>(c);
    if (a.act == Act::Compare) {
      // Float equality of the values, as check_values compares the tied pair.
      const float want = codes ? ops::dequantize_element(a.format, bytes.data() + 2 * k, nullptr, 0) : floats_[k];
      head_differs_ = head_differs_ || !(ops::dequantize_element(a.format, at, nullptr, 0) == want);
    } else if (codes) {
      at[0] = bytes[2 * k];
      at[1] = bytes[2 * k + 1];
    } else {
      // Not reached for a plan of kept_formats (a packed parameter's tensors are all of its format); exact then.
      const uint16_t h =
          a.format == ops::WeightFormat::F16 ? ops::f32_to_f16(floats_[k]) : ops::f32_to_bf16(floats_[k]);
      at[0] = static_cast<uint8_t>(h & 0xff);
      at[1] = static_cast<uint8_t>(h >> 8);
    }
    if (++c == a.cols) c = 0, ++r;
  }
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
  const uint8_t* base = a.packed ? a.packed : reinterpret_cast<const uint8_t*>(a.dst);
  if (a.act == Act::Write && base + offset == bytes.data()) return;
  // Else whole elements (the reader's staging guarantees it): element `first` of the tensor onwards.
  const size_t element = dtype_size(t.dtype), first = static_cast<size_t>(offset / element);
  const size_t n = bytes.size() / element;
  if (a.packed) return take_packed(a, t, first, n, bytes);
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
