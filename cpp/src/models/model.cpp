// Model: the calls every model shares, on its ModelCore (models/model_core.h).
#include "qkv/model.h"

#include "io/checkpoint.h"
#include "models/model_core.h"
#include "models/parameter_views.h"

namespace qkv {

Model::~Model() = default;

Device Model::device() const { return core().device(); }
void Model::to(Device device) {
  core().to(ops::backend(device));
  reset(true);
}

const OptimizerConfig& Model::optimizer() const { return core().optimizer.config(); }
void Model::set_learning_rate(float lr) { core().optimizer.set_learning_rate(lr); }
void Model::set_non_finite(NonFinite policy) { core().optimizer.set_non_finite(policy); }
void Model::set_training(bool training) { core().training = training; }
size_t Model::num_parameters() const { return const_cast<Model*>(this)->core().num_parameters(); }
MemoryUsage Model::memory() const { return core().memory(); }
int Model::step() const { return core().optimizer.steps(); }
int Model::skipped_steps() const { return core().optimizer.skipped(); }
bool Model::last_step_skipped() const { return core().optimizer.last_skipped(); }

void Model::zero_grad() { core().zero_grad(); }
bool Model::apply_gradients() { return core().apply_gradients(); }
void Model::set_gradient_sync(dist::GradientSync* sync) { core().set_sync(sync); }

std::vector<ParameterView> Model::parameters() { return models::views_of(core().params, kind()); }

std::vector<uint8_t> Model::save(bool with_optimizer, const std::map<std::string, std::string>& metadata) {
  return io::save_checkpoint(core(), kind(), config_json(), with_optimizer, metadata);
}
void Model::save_file(const std::string& path, bool with_optimizer,
                      const std::map<std::string, std::string>& metadata) {
  io::with_path(path, [&] { io::save_file(path, save(with_optimizer, metadata)); });
}
void Model::load_state(std::span<const uint8_t> bytes) {
  const io::Checkpoint c = io::read_checkpoint(bytes, kind());
  io::check_same_config(config_json(), c.config_json);
  io::restore_checkpoint(core(), c);
  reset(false);
}
void Model::load_weights(std::span<const uint8_t> bytes) {
  io::restore_weights(core(), bytes, config_json());
  reset(false);
}

}  // namespace qkv
