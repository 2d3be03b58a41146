#include "nn/parameters.h"

#include <algorithm>
#include <limits>

#include "ops/weight_quantize.h"
#include "qkv/error.h"
#include "runtime/random.h"

namespace qkv::nn {

thread_local bool Parameters::loading_ = false;
thread_local bool Parameters::shapes_only_ = false;
thread_local const Formats* Parameters::loading_formats_ = nullptr;

namespace {
size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }
size_t packed_bytes(const Param& p, ops::WeightFormat f) {
  return static_cast<size_t>(p.rows()) * ops::row_stride(f, p.cols());
}
size_t scale_count(const Param& p, ops::WeightFormat f) {
  return static_cast<size_t>(p.rows()) * static_cast<size_t>(ops::scales_per_row(f, p.cols()));
}
}  // namespace

Param& Parameters::add(std::string name, std::vector<int64_t> shape, Init init, float init_std) {
  check(values_.numel() == 0, "Parameters::add(", name, ") after finalize()");
  Param p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.init = init;
  p.init_std = init_std;
  p.decay = p.shape.size() >= 2;
  // Checked: on wasm32 (32-bit size_t) a model far too large would otherwise wrap to a small size.
  constexpr size_t kMax = std::numeric_limits<size_t>::max() / sizeof(float) - 16;
  p.numel = 1;
  for (int64_t d : p.shape) {
    check(d >= 0 && (d == 0 || p.numel <= kMax / static_cast<uint64_t>(d)), "out of memory: parameter ", p.name,
          " is too large for this build's address space");
    p.numel *= static_cast<size_t>(d);
  }
  check(p.numel <= kMax - total_, "out of memory: the parameters reach ", p.name,
        " beyond this build's address space (a model this large cannot be held)");
  p.offset = total_;
  total_ += (p.numel + 15) / 16 * 16;  // 64-byte aligned tensors
  params_.push_back(std::move(p));
  return params_.back();
}

Constant& Parameters::add_constant(std::vector<float> host_values) {
  check(values_.numel() == 0, "Parameters::add_constant after finalize()");
  constants_.push_back({std::move(host_values), {}});
  return constants_.back();
}

std::pair<size_t, size_t> Parameters::layout(const std::vector<ops::WeightFormat>& formats,
                                             std::vector<size_t>& offsets) const {
  size_t floats = 0, bytes = 0, i = 0;
  offsets.clear();
  for (const Param& p : params_) {
    const ops::WeightFormat f = formats[i++];
    if (f == ops::WeightFormat::F32) {
      offsets.push_back(floats);
      floats += (p.numel + 15) / 16 * 16;  // 64-byte aligned tensors
    } else {
      offsets.push_back(bytes);
      bytes += round64(packed_bytes(p, f)) + round64(scale_count(p, f) * sizeof(float));
    }
  }
  return {floats, bytes};
}

Formats Parameters::formats() const {
  Formats out;
  for (const Param& p : params_)
    if (p.is_packed()) out[p.name] = p.format;
  return out;
}

void Parameters::bind() {
  const bool whole = has_training() && !moments_sharded();
  auto* const bytes = reinterpret_cast<uint8_t*>(packed_.data());
  for (Param& p : params_) {
    if (p.is_packed()) {
      const size_t n = packed_bytes(p, p.format);
      p.value = p.grad = p.m = p.v = Span{};
      p.packed = {bytes + p.offset, n};
      p.scales = {reinterpret_cast<float*>(bytes + p.offset + round64(n)), scale_count(p, p.format)};
      continue;
    }
    p.packed = {};
    p.scales = {};
    p.value = {values_.data() + p.offset, p.numel};
    p.grad = has_training() ? Span{grads_.data() + p.offset, p.numel} : Span{};
    p.m = whole ? Span{m_.data() + p.offset, p.numel} : Span{};
    p.v = whole ? Span{v_.data() + p.offset, p.numel} : Span{};
  }
  size_t at = 0;
  for (Constant& c : constants_) {
    c.value = {constants_buf_.data() + at, c.host.size()};
    at += (c.host.size() + 15) / 16 * 16;
  }
}

void Parameters::finalize(uint64_t seed) {
  if (loading_ && shapes_only_) return;  // names and shapes only (ForLoading(ShapesOnly)): nothing to hold
  const Device d = device();
  if (loading_ && loading_formats_ && !loading_formats_->empty()) {
    // A quantized checkpoint's tensors are laid out packed at once: their float32 values never exist. Names the
    // model lacks, and tensors that cannot be packed, are left to the loader's checks (they name them).
    std::vector<ops::WeightFormat> formats;
    for (const Param& p : params_) {
      const auto it = loading_formats_->find(p.name);
      formats.push_back(it != loading_formats_->end() && p.shape.size() == 2 ? it->second : ops::WeightFormat::F32);
    }
    std::vector<size_t> offsets;
    const auto [floats, bytes] = layout(formats, offsets);
    packed_ = Tensor({static_cast<int64_t>(bytes / sizeof(float))}, d);
    size_t i = 0;
    packed_count_ = 0;
    for (Param& p : params_) {
      p.format = formats[i];
      p.offset = offsets[i++];
      packed_count_ += p.is_packed();
    }
    total_ = floats;
  }
  const std::vector<int64_t> shape{static_cast<int64_t>(total_)};
  values_ = Tensor(shape, d);
  size_t constant_floats = 0;
  for (const Constant& c : constants_) constant_floats += (c.host.size() + 15) / 16 * 16;
  constants_buf_ = Tensor({static_cast<int64_t>(constant_floats)}, d);
  if (loading_) {
    bind();
    for (Constant& c : constants_) ops_->upload(c.value.data(), c.host.data(), c.host.size() * sizeof(float));
    return;
  }
  grads_ = Tensor(shape, d);
  m_ = Tensor(shape, d);
  v_ = Tensor(shape, d);
  bind();
  // The initial values are drawn on the host, in registration order, and uploaded once.
  std::vector<float> init(total_, 0.f);
  Rng rng(seed);
  for (const Param& p : params_) {
    float* x = init.data() + p.offset;
    switch (p.init) {
      case Init::Zeros: break;
      case Init::Ones: std::fill_n(x, p.numel, 1.f); break;
      case Init::Normal:
        for (size_t i = 0; i < p.numel; ++i) x[i] = static_cast<float>(rng.normal() * p.init_std);
        break;
    }
  }
  ops_->upload(values_.data(), init.data(), total_ * sizeof(float));
  for (Constant& c : constants_) ops_->upload(c.value.data(), c.host.data(), c.host.size() * sizeof(float));
}

void Parameters::set_frozen(bool frozen) {
  frozen_ = frozen;
  if (!frozen) return;
  grads_ = Tensor();
  m_ = Tensor();
  v_ = Tensor();
  m_begin_ = 0;
  bind();
}

void Parameters::ensure_training() {
  check(!frozen_, "the model's base weights are frozen (LoRA adapters train): they have no gradients");
  if (packed_count_ > 0) {
    const Param* first = nullptr;
    for (const Param& p : params_)
      if (!first && p.is_packed()) first = &p;
    throw Error(detail::cat(
        "this model's weights are quantized (", ops::format_name(first->format), ": ", first->name, " and ",
        packed_count_ - 1,
        " more): a quantized model is for inference only (generate, predict, evaluate, logits); "
        "to fine-tune it, add LoRA adapters (add_lora; addLora in JS) and train them on the frozen quantized base, "
        "or train the float32 model and quantize it afterwards"));
  }
  if (has_training() || values_.numel() == 0) return;
  const std::vector<int64_t> shape{static_cast<int64_t>(total_)};
  // Built whole before any is kept: out of memory leaves the model as it was (weights only).
  Tensor g(shape, device()), m(shape, device()), v(shape, device());
  grads_ = std::move(g);
  m_ = std::move(m);
  v_ = std::move(v);
  m_begin_ = 0;
  bind();
}

void Parameters::zero_grad() {
  ensure_training();
  ops_->fill(grads_.span(), 0.f);
}

void Parameters::shard_moments(size_t begin, size_t end) {
  ensure_training();
  check(begin < end && end <= total_, "shard_moments(", begin, ", ", end, "): expected 0 <= begin < end <= ", total_);
  const std::vector<int64_t> shape{static_cast<int64_t>(end - begin)};
  Tensor m(shape, device()), v(shape, device());
  const size_t old_end = m_begin_ + m_.numel(), from = std::max(begin, m_begin_), until = std::min(end, old_end);
  if (from < until) {
    ops_->copy(m.data() + (from - begin), m_.data() + (from - m_begin_), (until - from) * sizeof(float));
    ops_->copy(v.data() + (from - begin), v_.data() + (from - m_begin_), (until - from) * sizeof(float));
  }
  m_ = std::move(m);
  v_ = std::move(v);
  m_begin_ = begin;
  bind();
}

void Parameters::quantize(const std::vector<std::pair<Param*, ops::WeightFormat>>& which) {
  check(values_.numel() > 0 || total_ == 0, "Parameters::quantize before finalize()");
  std::map<const Param*, size_t> index;
  for (const Param& p : params_) index.emplace(&p, index.size());
  std::vector<ops::WeightFormat> formats;
  for (const Param& p : params_) formats.push_back(p.format);
  for (const auto& [param, f] : which) {
    const auto it = index.find(param);
    check(it != index.end(), "quantize: the parameter is not this model's");
    const Param& p = *param;
    check(f != ops::WeightFormat::F32, "quantize: ", p.name, ": f32 is not a packed format");
    check(!p.is_packed(), "quantize: ", p.name, " is already stored as ", ops::format_name(p.format),
          ": quantize a float32 model (its float32 checkpoint) instead");
    check(p.shape.size() == 2 && p.rows() > 0 && p.cols() > 0, "quantize: ", p.name,
          " is not a matrix: only 2-D weights are stored packed");
    formats[it->second] = f;
  }
  std::vector<size_t> offsets;
  const auto [floats, bytes] = layout(formats, offsets);
  const Device d = device();
  // The new buffers are built whole before anything is swapped in: out of memory leaves the model as it was.
  Tensor values({static_cast<int64_t>(floats)}, d), packed({static_cast<int64_t>(bytes / sizeof(float))}, d);
  auto* const to = reinterpret_cast<uint8_t*>(packed.data());
  std::vector<float> host, scales;
  std::vector<uint8_t> rows;
  size_t i = 0;
  for (const Param& p : params_) {
    const ops::WeightFormat f = formats[i];
    const size_t at = offsets[i++];
    if (f == ops::WeightFormat::F32) {
      if (p.numel) ops_->copy(values.data() + at, p.value.data(), p.numel * sizeof(float));
      continue;
    }
    const size_t n = packed_bytes(p, f);
    auto* const scales_at = to + at + round64(n);
    if (p.is_packed()) {  // packed before: the same rows at their new place
      ops_->copy(to + at, p.packed.data(), n);
      if (!p.scales.empty()) ops_->copy(scales_at, p.scales.data(), p.scales.size_bytes());
      continue;
    }
    // Quantized on the host (ops/weight_format.h's rule, the same on every device), then uploaded.
    host.resize(p.numel);
    ops_->download(host.data(), p.value.data(), p.numel * sizeof(float));
    rows.resize(n);
    scales.resize(scale_count(p, f));
    ops::quantize_rows(f, host.data(), p.rows(), p.cols(), rows.data(), scales.data());
    ops_->upload(to + at, rows.data(), n);
    if (!scales.empty()) ops_->upload(scales_at, scales.data(), scales.size() * sizeof(float));
  }
  values_ = std::move(values);
  packed_ = std::move(packed);
  grads_ = Tensor();  // a quantized model does not train (ensure_training)
  m_ = Tensor();
  v_ = Tensor();
  m_begin_ = 0;
  total_ = floats;
  packed_count_ = 0;
  i = 0;
  for (Param& p : params_) {
    p.format = formats[i];
    p.offset = offsets[i++];
    packed_count_ += p.is_packed();
  }
  set_int8_act(int8_act_);
  bind();
}

void Parameters::set_int8_act(bool on) {
  int8_act_ = on;
  for (Param& p : params_)
    p.int8_act = on && (p.format == ops::WeightFormat::Int8 || p.format == ops::WeightFormat::Q4);
}

void Parameters::to(ops::Backend& target) {
  if (&target == ops_) return;
  // Everything is copied to the new device first, through the host, and only then swapped in: a failure (out of
  // GPU memory) leaves the model whole where it was.
  Tensor* const buffers[] = {&values_, &grads_, &m_, &v_, &constants_buf_, &packed_};
  std::vector<Tensor> moved;
  std::vector<float> host;
  for (Tensor* t : buffers) {
    if (t->numel() == 0) {  // gradients and moments not made yet (ForLoading): made on the new device when needed
      moved.emplace_back();
      continue;
    }
    host.resize(t->numel());
    ops_->download(host.data(), t->data(), host.size() * sizeof(float));
    moved.emplace_back(t->shape(), target.device());
    target.upload(moved.back().data(), host.data(), host.size() * sizeof(float));
  }
  for (size_t i = 0; i < moved.size(); ++i) *buffers[i] = std::move(moved[i]);
  ops_ = &target;
  bind();
}

}  // namespace qkv::nn
