// Model: the calls every model shares, on its ModelCore (models/model_core.h).
#include "qkv/model.h"

#include "io/checkpoint.h"
#include "models/lora_set.h"
#include "models/model_core.h"
#include "models/parameter_views.h"
#include "ops/weight_quantize.h"
#include "qkv/error.h"

namespace qkv {

float StepLoss::get() const {
  check(state_ != nullptr, "StepLoss::get: no training step (a default-constructed StepLoss)");
  if (!state_->settled && state_->core) {
    try {
      state_->core->settle_through(*state_);
    } catch (...) {
      // An earlier step's error settled this one too: this step's own answer (that it did not run) is thrown.
      if (!state_->error) throw;
    }
  }
  if (state_->error) std::rethrow_exception(state_->error);
  return state_->loss;
}
bool StepLoss::skipped() const {
  get();
  return state_->skipped;
}
bool StepLoss::ready() const { return state_ && state_->settled; }

Model::~Model() = default;

namespace {
// The steps in flight settled first (models/model_core.h: queue_train_step), for a call that reads or changes what
// they leave.
models::ModelCore& settled(models::ModelCore& core) {
  core.settle_all();
  return core;
}
models::ModelCore& settled(const models::ModelCore& core) { return settled(const_cast<models::ModelCore&>(core)); }
}  // namespace

Device Model::device() const { return core().device(); }
void Model::to(Device device) {
  settled(core()).to(ops::backend(device));
  reset(true);
}

const OptimizerConfig& Model::optimizer() const { return core().opt().config(); }
// Steps in flight keep the lr they were queued with (ops/adam_plan.h): no need to settle them.
// With adapters, both optimizers (the adapters' and the base's, for after remove_lora) take the settings.
void Model::set_learning_rate(float lr) {
  core().optimizer.set_learning_rate(lr);
  if (core().lora) core().lora->optimizer.set_learning_rate(lr);
}
void Model::set_non_finite(NonFinite policy) {
  settled(core()).optimizer.set_non_finite(policy);
  if (core().lora) core().lora->optimizer.set_non_finite(policy);
}
void Model::set_training(bool training) { core().training = training; }
void Model::set_recompute(Recompute mode) {
  models::ModelCore& c = settled(core());  // queued steps read the arena, which is planned again
  if (c.recompute == mode) return;
  c.recompute = mode;
  reset(true);
}
Recompute Model::recompute() const { return core().recompute; }
size_t Model::num_parameters() const { return const_cast<Model*>(this)->core().num_parameters(); }
MemoryUsage Model::memory() const { return core().memory(); }
int Model::step() const { return settled(core()).opt().steps(); }
int Model::skipped_steps() const { return settled(core()).opt().skipped(); }
bool Model::last_step_skipped() const { return settled(core()).opt().last_skipped(); }

void Model::zero_grad() { settled(core()).zero_grad(); }
bool Model::apply_gradients() { return settled(core()).apply_gradients(); }
void Model::set_gradient_sync(dist::GradientSync* sync) { settled(core()).set_sync(sync); }

namespace {
static_assert(static_cast<int>(WeightFormat::F16) == static_cast<int>(ops::WeightFormat::F16) &&
                  static_cast<int>(WeightFormat::BF16) == static_cast<int>(ops::WeightFormat::BF16) &&
                  static_cast<int>(WeightFormat::Int8) == static_cast<int>(ops::WeightFormat::Int8) &&
                  static_cast<int>(WeightFormat::Q4) == static_cast<int>(ops::WeightFormat::Q4),
              "qkv::WeightFormat mirrors ops::WeightFormat");
}  // namespace

const char* to_string(WeightFormat format) { return ops::format_name(static_cast<ops::WeightFormat>(format)); }

WeightFormat weight_format_from_string(const std::string& name, const char* argument) {
  for (WeightFormat f :
       {WeightFormat::F32, WeightFormat::F16, WeightFormat::BF16, WeightFormat::Int8, WeightFormat::Q4})
    if (name == to_string(f)) return f;
  throw Error(detail::cat(argument, " = \"", name, "\" is not a weight format: expected \"int8\", \"q4\", \"f16\", ",
                          "\"bf16\" or \"f32\""));
}

WeightFormat quantized_format_from_string(const std::string& name, const char* argument) {
  for (WeightFormat f : {WeightFormat::F16, WeightFormat::BF16, WeightFormat::Int8, WeightFormat::Q4})
    if (name == to_string(f)) return f;
  throw Error(detail::cat(argument, " = \"", name,
                          "\" is not a quantized format: expected \"int8\", \"q4\", \"f16\" or ", "\"bf16\"",
                          name == "f32" ? " (float32 is what the model holds before it is quantized)" : ""));
}

const char* to_string(QuantActivations activations) { return activations == QuantActivations::Int8 ? "int8" : "f32"; }

QuantActivations quant_activations_from_string(const std::string& name, const char* argument) {
  for (QuantActivations a : {QuantActivations::F32, QuantActivations::Int8})
    if (name == to_string(a)) return a;
  throw Error(detail::cat(argument, " = \"", name, "\" is not an activation format: expected \"int8\" or \"f32\""));
}

const char* to_string(Recompute mode) { return mode == Recompute::On ? "on" : mode == Recompute::Off ? "off" : "auto"; }

Recompute recompute_from_string(const std::string& name, const char* argument) {
  for (Recompute m : {Recompute::Auto, Recompute::On, Recompute::Off})
    if (name == to_string(m)) return m;
  throw Error(
      detail::cat(argument, " = \"", name, "\" is not a recomputation mode: expected \"auto\", \"on\" or \"off\""));
}

void Model::quantize(WeightFormat format, const QuantizeOptions& options) {
  const int f = static_cast<int>(format);
  check(f >= static_cast<int>(WeightFormat::F16) && f <= static_cast<int>(WeightFormat::Q4),
        "quantize: format = ", f == 0 ? std::string("f32") : std::to_string(f),
        " is not a quantized format: expected int8, q4, f16 or bf16");
  check(options.activations == QuantActivations::F32 || format == WeightFormat::Int8 || format == WeightFormat::Q4,
        "quantize: activations = int8 needs int8 or q4 weights (integer dot products), not ", to_string(format));
  models::ModelCore& c = settled(core());
  // An if, not check(): check's arguments are all evaluated, and an unquantized model's formats() is empty.
  if (c.params.packed_count() != 0)
    throw Error(detail::cat("quantize: this model is already quantized (",
                            to_string(static_cast<WeightFormat>(c.params.formats().begin()->second)),
                            "); quantize its float32 model instead (load the float32 checkpoint again)"));
  check(c.sync == nullptr, "quantize: the model trains in a data-parallel group (set_gradient_sync): leave it first ",
        "(set_gradient_sync(nullptr)); a quantized model does not train");
  const bool embedding = options.embedding.value_or(tied_head());
  std::vector<std::pair<nn::Param*, ops::WeightFormat>> which;
  for (nn::Param& p : c.params.all())
    if (p.matrix || (embedding && p.embedding)) which.emplace_back(&p, static_cast<ops::WeightFormat>(format));
  const bool was = c.params.int8_act();
  c.params.set_int8_act(options.activations == QuantActivations::Int8);
  try {
    c.params.quantize(which);
  } catch (...) {
    c.params.set_int8_act(was);
    throw;
  }
  // KV caches hold keys of the old weights; with adapters, the frozen base's backward now needs scratch for the
  // dequantized rows (planned again).
  reset(c.lora != nullptr);
}

void Model::set_quant_activations(QuantActivations activations) {
  models::ModelCore& c = settled(core());
  const bool on = activations == QuantActivations::Int8;
  bool has = false;
  for (const nn::Param& p : c.params.all())
    has = has || p.format == ops::WeightFormat::Int8 || p.format == ops::WeightFormat::Q4;
  check(!on || has, "set_quant_activations: activations = int8 needs int8 or q4 weights, and this model has none ",
        "(quantize it with weights int8 or q4 first)");
  c.params.set_int8_act(on);
}
QuantActivations Model::quant_activations() const {
  return core().params.int8_act() ? QuantActivations::Int8 : QuantActivations::F32;
}

std::map<std::string, WeightFormat> Model::weight_formats() const {
  std::map<std::string, WeightFormat> out;
  for (const auto& [name, f] : core().params.formats()) out[name] = static_cast<WeightFormat>(f);
  return out;
}

void Model::add_lora(const LoraOptions& options) {
  models::add_lora(settled(core()), options);
  reset(true);  // the layers plan their adapters' buffers (and a frozen base's scratch) at the next call
}
bool Model::has_lora() const { return core().lora != nullptr; }
const LoraOptions& Model::lora_options() const {
  check(core().lora != nullptr, "lora_options: this model has no LoRA adapters (add_lora first)");
  return core().lora->options;
}
void Model::merge_lora() {
  models::merge_lora(settled(core()));
  reset(true);
}
void Model::remove_lora() {
  models::remove_lora(settled(core()));
  reset(true);
}
std::vector<ParameterView> Model::lora_parameters() {
  models::ModelCore& c = settled(core());
  if (!c.lora) return {};
  return models::views_of(c.lora->params, kind());
}

std::vector<ParameterView> Model::parameters() { return models::views_of(settled(core()).params, kind()); }

std::vector<uint8_t> Model::save(bool with_optimizer, const std::map<std::string, std::string>& metadata) {
  return io::save_checkpoint(settled(core()), kind(), config_json(), with_optimizer, metadata);
}
void Model::save_file(const std::string& path, bool with_optimizer,
                      const std::map<std::string, std::string>& metadata) {
  io::with_path(
      path, [&] { io::save_checkpoint_file(path, settled(core()), kind(), config_json(), with_optimizer, metadata); });
}
void Model::load_state(std::span<const uint8_t> bytes) {
  const io::Checkpoint c = io::read_checkpoint(bytes, kind());
  io::check_same_config(config_json(), c.config_json);
  // The file's adapters, added to a model that had none, plan their buffers at the next call (as after add_lora).
  reset(io::restore_checkpoint(settled(core()), c));
}
void Model::load_weights(std::span<const uint8_t> bytes) {
  io::restore_weights(settled(core()), bytes, config_json());
  reset(false);
}

}  // namespace qkv
