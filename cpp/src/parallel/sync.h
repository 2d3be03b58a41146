#pragma once
// What a model's training step asks of a data-parallel group (parallel/data_parallel.h), so that models/ knows
// no communicator: models::ModelCore::apply_gradients calls reduce() before the optimizer step and after_step()
// after it. An implementation hears of the backward's progress through nn::Parameters::on_grads_final.
#include "nn/parameters.h"

namespace qkv::dist {

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // The model joins (listens to params' backward progress) or leaves.
  virtual void attach(nn::Parameters& params) = 0;
  virtual void detach(nn::Parameters& params) = 0;
  // Before the optimizer step: every rank's gradients summed into params.grads() (reductions started during the
  // backward are waited for, the others run now). finite_loss: this rank's losses since zero_grad were finite;
  // returns whether every rank's were, so that every rank takes or skips the step alike.
  virtual bool reduce(nn::Parameters& params, bool finite_loss) = 0;
  // After a step taken (the same on every rank).
  virtual void after_step(nn::Parameters& params) = 0;
};

}  // namespace qkv::dist
