#pragma once
// StepLoss: the loss of a training step queued with queue_train_step (LanguageModel, Seq2Seq, Classifier), read
// when the caller wants it. On a GPU the step runs while the host goes on (prepares the next batch, queues the next
// step): a training loop that reads each loss one or two steps late keeps the GPU busy without a gap between steps.
// Copies share the step. Like its model, a StepLoss is used from one thread at a time (the model's).
#include <exception>
#include <memory>
#include <utility>

namespace qkv {

namespace models {
struct ModelCore;
}

class StepLoss {
 public:
  StepLoss() = default;  // no step: get() throws

  // The step's mean loss, as train_step returns it. Waits for the step, and settles it and the steps queued
  // before it (the model's step(), skipped_steps() and last_step_skipped() then count them). Throws qkv::Error as
  // train_step would have under NonFinite::Error, and for a step that did not run because one queued before it
  // threw; a later get() throws the same again.
  float get() const;
  // Whether the step was skipped under NonFinite::Skip (its loss or gradient norm not finite: nothing updated), as
  // Model::last_step_skipped() right after it. Waits and throws as get().
  bool skipped() const;
  // The step is settled: get() returns (or throws) without waiting.
  bool ready() const;
  bool valid() const { return state_ != nullptr; }

  // What the model fills in when it settles the step.
  struct State {
    models::ModelCore* core = nullptr;  // the model, until the step is settled
    bool settled = false;
    float loss = 0.f;
    bool skipped = false;
    std::exception_ptr error;
  };

 private:
  friend struct models::ModelCore;
  explicit StepLoss(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

}  // namespace qkv
