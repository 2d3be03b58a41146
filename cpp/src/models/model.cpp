// Model: the calls every model shares, on its ModelCore (models/model_core.h).
#include "qkv/model.h"

#include "io/checkpoint.h"
#include "models/model_core.h"
#include "models/parameter_views.h"
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

const OptimizerConfig& Model::optimizer() const { return core().optimizer.config(); }
// Steps in flight keep the lr they were queued with (ops/adam_plan.h): no need to settle them.
void Model::set_learning_rate(float lr) { core().optimizer.set_learning_rate(lr); }
void Model::set_non_finite(NonFinite policy) { settled(core()).optimizer.set_non_finite(policy); }
void Model::set_training(bool training) { core().training = training; }
size_t Model::num_parameters() const { return const_cast<Model*>(this)->core().num_parameters(); }
MemoryUsage Model::memory() const { return core().memory(); }
int Model::step() const { return settled(core()).optimizer.steps(); }
int Model::skipped_steps() const { return settled(core()).optimizer.skipped(); }
bool Model::last_step_skipped() const { return settled(core()).optimizer.last_skipped(); }

void Model::zero_grad() { settled(core()).zero_grad(); }
bool Model::apply_gradients() { return settled(core()).apply_gradients(); }
void Model::set_gradient_sync(dist::GradientSync* sync) { settled(core()).set_sync(sync); }

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
  io::restore_checkpoint(settled(core()), c);
  reset(false);
}
void Model::load_weights(std::span<const uint8_t> bytes) {
  io::restore_weights(settled(core()), bytes, config_json());
  reset(false);
}

}  // namespace qkv
