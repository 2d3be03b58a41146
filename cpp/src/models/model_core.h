#pragma once
// What the three models share: parameters, the optimizer, the workspace, dropout seeding and the steps of
// a training call (zero the gradients, forward, loss, backward, check, update). Each model supplies its
// forward/backward; this keeps the order of a step and its error behaviour in one place.
//
// The model's device: parameters, gradients, moments and the workspace live there, and every layer calls its
// backend (params.ops()). What crosses to the host, at the API's edges only: the ids of a batch (in), the
// per-row losses and argmax of a loss evaluation, logits asked for, and after a training step its per-row losses
// and the sums of squares behind the update's decision (two doubles).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "models/lora_set.h"
#include "nn/dropout.h"
#include "nn/parameters.h"
#include "ops/ops.h"
#include "parallel/sync.h"
#include "qkv/error.h"
#include "qkv/memory.h"
#include "qkv/optimizer.h"
#include "qkv/options.h"
#include "qkv/step_loss.h"
#include "qkv/workspace.h"
#include "train/optimizer.h"

namespace qkv::models {

struct ModelCore {
  nn::Parameters params;
  train::Optimizer optimizer;
  Workspace ws;
  uint64_t seed;
  float dropout;
  bool training = true;
  Recompute recompute = Recompute::Auto;  // Model::set_recompute
  uint64_t passes = 0;                    // forward passes run: each gets its own dropout seed

  ModelCore(const OptimizerConfig& o, uint64_t seed_, float dropout_, ops::Backend& backend)
      : params(backend), optimizer(o), seed(seed_), dropout(dropout_) {
    ws.set_device(backend.device());
  }

  ops::Backend& ops() { return params.ops(); }

  // LoRA adapters (models/lora_set.h), when the model has them: they are then what trains, with their own
  // optimizer, and the base (params) is frozen. trained() and opt() are what every training call works on.
  std::unique_ptr<LoraSet> lora;
  uint64_t lora_changes = 0;  // adapters added or removed: a step queued whole before is not the same step
  nn::Parameters& trained() { return lora ? lora->params : params; }
  const nn::Parameters& trained() const { return lora ? lora->params : params; }
  train::Optimizer& opt() { return lora ? lora->optimizer : optimizer; }
  // Whether the stacks plan activation recomputation (nn/stack.h): Recompute::Auto means with adapters.
  bool recomputes() const { return recompute == Recompute::On || (recompute == Recompute::Auto && lora); }
  const train::Optimizer& opt() const { return lora ? lora->optimizer : optimizer; }
  Device device() const { return params.device(); }

  // Moves parameters, gradients and moments to `backend`'s device; the workspace is freed and must be planned
  // again (the model resets its capacities). Nothing changes when the move fails.
  void to(ops::Backend& backend) {
    ops::Backend& from = params.ops();
    params.to(backend);
    if (lora) {
      try {
        lora->params.to(backend);
      } catch (...) {
        params.to(from);  // nothing moves
        throw;
      }
    }
    ws.set_device(backend.device());
  }

  // Host staging for what comes back from the device at the API's edges; reused, so it grows once.
  std::vector<float> host_floats;
  std::vector<int32_t> host_ints;

  // A device span's values on the host: the span itself on the CPU, else a download into `staging`.
  CSpan to_host(CSpan x, std::vector<float>& staging) {
    if (device() == Device::CPU) return x;
    staging.resize(x.size());
    ops().download(staging.data(), x.data(), x.size_bytes());
    return staging;
  }
  std::span<const int32_t> to_host(std::span<const int32_t> x, std::vector<int32_t>& staging) {
    if (device() == Device::CPU) return x;
    staging.resize(x.size());
    ops().download(staging.data(), x.data(), x.size_bytes());
    return staging;
  }

  // The dropout of the next forward pass: off in eval mode.
  nn::Dropout next_dropout(bool train_pass) {
    ++passes;
    const bool train = train_pass && training;
    return {train ? dropout : 0.f, seed * 0x9E3779B97F4A7C15ull + passes, train};
  }

  // Set when a micro-batch's loss since the gradients were last zeroed was not finite (NonFinite::Skip):
  // the next optimizer step is then skipped, whatever the gradients of the other micro-batches.
  bool nonfinite_loss = false;
  // Whether a micro-batch was accumulated since the gradients were last zeroed (or the model made): an
  // apply_gradients() without one would step on gradients that hold nothing of the caller's (zeros, or an
  // earlier step's), which is a caller's slip, not an intent, so it is refused.
  bool accumulated = false;

  void zero_grad() {
    trained().zero_grad();
    nonfinite_loss = false;
    accumulated = false;
  }

  // Every model checks its loss here, between its forward and its backward. A finite loss returns true:
  // run the backward. A non-finite one throws under NonFinite::Error (nothing is accumulated; the weights
  // are untouched); under Skip it marks the pending optimizer step as skipped and returns false, and the
  // backward is not run (its gradients would be dropped anyway).
  bool check_loss(float loss) {
    if (std::isfinite(loss)) return true;
    check(opt().config().non_finite == NonFinite::Skip, "the loss is not finite (", loss,
          "); no gradient was accumulated and the weights are unchanged (try a lower lr)");
    nonfinite_loss = true;
    return false;
  }

  // One optimizer step on the accumulated gradients; false when it was skipped (NonFinite::Skip: a
  // non-finite loss or gradient norm; the gradients are then zeroed). See Optimizer::step.
  bool apply_gradients() {
    settle_all();
    trained().ensure_training();
    // Not under data parallel: a rank refusing alone would leave the others waiting in the reduction, so there
    // a step with nothing accumulated goes on (its zero gradients summed with the other ranks').
    check(accumulated || sync, "apply_gradients: no micro-batch was accumulated since zero_grad() (call ",
          "accumulate() or forward_backward() first); the weights are unchanged");
    bool finite_loss = !nonfinite_loss;
    nonfinite_loss = false;
    if (!sync) {
      const bool stepped = opt().step(trained(), finite_loss);
      if (!stepped) accumulated = false;  // skipped: the gradients were zeroed
      return stepped;
    }
    // Data parallel: every rank's gradients summed (each rank weighted its share of the global batch) before
    // the norm, the clipping and the step, which then see the same values on every rank.
    finite_loss = sync->reduce(trained(), finite_loss);
    const bool stepped = opt().step(trained(), finite_loss);
    if (stepped) sync->after_step(trained());
    return stepped;
  }

  // The data-parallel group this model trains in (nullptr: alone). The caller keeps it alive while set.
  dist::GradientSync* sync = nullptr;
  void set_sync(dist::GradientSync* s) {
    trained().ensure_training();
    if (sync) sync->detach(trained());
    sync = s;
    if (sync) sync->attach(trained());
  }

  // A training forward's loss still on the device: the per-row losses (ignored rows hold 0) and how many rows
  // count (known on the host from the targets).
  struct PendingLoss {
    CSpan losses;
    long long count = 0;
  };
  // The mean loss (NaN when no row counts): the per-row losses summed on the host in row order, in double.
  float read_loss(const PendingLoss& l) {
    const CSpan host = to_host(l.losses, host_floats);
    double sum = 0.0;
    for (float x : host) sum += x;  // ignored rows hold 0
    return static_cast<float>(sum / static_cast<double>(l.count));
  }

  // A micro-batch's loss and gradients, checked in order (the public forward_backward and accumulate):
  // forward_loss(), the loss read and checked (check_loss), then backward() when it is finite.
  template <class ForwardLoss, class Backward>
  float accumulate(ForwardLoss&& forward_loss, Backward&& backward) {
    settle_all();
    trained().ensure_training();
    const float loss = read_loss(forward_loss());
    accumulated = true;  // a non-finite loss counts too: it marks the step as skipped
    if (check_loss(loss)) backward();
    return loss;
  }

  // One training step: zero the gradients, forward_loss() (queues the forward and the loss with its gradient,
  // returns the PendingLoss), backward(), the update. A non-finite loss or gradient throws, or under
  // NonFinite::Skip skips the update; either way the weights are untouched. Returns the mean loss.
  //
  // The step is queued whole, the host reading nothing until its end: the backward runs whatever the loss, and
  // the device gates the update on the losses and the gradient norm (Optimizer::queue), so that a backend can
  // launch the step as one unit (ops.h: begin_step; CUDA graphs). `key` names the step's shape for that.
  // The host then reads the loss and the outcome, and answers as a step that checked the loss first would:
  // under NonFinite::Error the gradients are zeroed again (the step began from zero) and check_loss throws.
  // Backends that decide on the host (CPU, WebGPU: queues_whole_steps() false) keep the checked order, which
  // waits less there (no backward for a non-finite loss, no sums read back); so does data parallel, whose
  // reduction carries the loss's finiteness (parallel/).
  template <class ForwardLoss, class Backward>
  float train_step(uint64_t key, ForwardLoss&& forward_loss, Backward&& backward) {
    settle_all();
    zero_grad();
    if (sync || !ops().queues_whole_steps()) {
      const float loss = accumulate(forward_loss, backward);
      apply_gradients();
      return loss;
    }
    const uint64_t passes_before = passes;
    const PendingLoss pending = queue_step(key ^ step_key(), passes_before, forward_loss, backward);
    const float loss = read_loss(pending);
    if (!std::isfinite(loss)) {
      if (opt().config().non_finite == NonFinite::Error) {
        trained().zero_grad();
        opt().end_halt();  // the device halted on the refusal (ops/adam_plan.h)
      }
      check_loss(loss);  // throws under NonFinite::Error
      opt().finish(trained(), false);
      nonfinite_loss = false;
      return loss;
    }
    opt().finish(trained(), true);
    return loss;
  }

  // A training step as train_step's, queued without waiting for it where the backend decides on the device
  // (queues_whole_steps: CUDA): its per-row losses and the update's sums are copied back behind it
  // (Backend::read_later) and read when the StepLoss asks, or when a later call needs the steps settled
  // (settle_all). Up to ops::kMaxStepsAhead + 1 steps are in flight: queuing one more settles the oldest first (it
  // waits). The device decides each update (ops/adam_plan.h), so the steps in flight compute what train_step would,
  // bit for bit; under NonFinite::Error the settle that meets a refused step throws its error, and the steps queued
  // behind it, halted on the device, are dropped (their losses throw; the dropout passes go back to the refused
  // step's). Elsewhere (the CPU, WebGPU, data parallel) the step is train_step's, run now.
  template <class ForwardLoss, class Backward>
  StepLoss queue_train_step(uint64_t key, ForwardLoss&& forward_loss, Backward&& backward) {
    auto state = std::make_shared<StepLoss::State>();
    if (sync || !ops().queues_whole_steps()) {
      state->loss = train_step(key, forward_loss, backward);
      state->skipped = opt().last_skipped();
      state->settled = true;
      return StepLoss(state);
    }
    while (in_flight.size() > static_cast<size_t>(ops::kMaxStepsAhead)) settle_one();
    zero_grad();
    const uint64_t passes_before = passes;
    const PendingLoss pending = queue_step(key ^ step_key(), passes_before, forward_loss, backward, true);
    InFlight f{state, 0, pending.losses.size(), pending.count, passes};
    if (pending.count == 0) {
      // No row counts: the loss is NaN, known now, and no update was queued: answered now, after the steps
      // before it, as train_step answers it.
      state->settled = true;
      try {
        settle_all();
      } catch (...) {
        state->error = std::current_exception();  // it was dropped with the steps behind the one that threw
        throw;
      }
      state->loss = std::numeric_limits<float>::quiet_NaN();
      if (opt().config().non_finite == NonFinite::Error) trained().zero_grad();
      try {
        check_loss(state->loss);
      } catch (...) {
        state->error = std::current_exception();
        throw;
      }
      state->skipped = !opt().finish(trained(), false);
      nonfinite_loss = false;
      return StepLoss(state);
    }
    f.losses = pending.losses;
    f.sums = opt().sums_span(trained());
    state->core = this;
    try {
      const std::array<CSpan, 2> parts{f.losses, f.sums};
      f.read = ops().read_later(parts);
    } catch (...) {
      // The step is queued, and may be taken on the device: it must be settled, now, with reads that wait
      // (read 0). The losses and sums stay where they are until a later step is queued.
      in_flight.push_back(f);
      settle_all();
      return StepLoss(state);
    }
    in_flight.push_back(f);
    return StepLoss(state);
  }

  // Settles every step in flight, oldest first (waits). Every call that reads or changes what a training step
  // leaves (the optimizer's counts, the weights, the gradients, the dropout passes) settles first.
  void settle_all() {
    while (!in_flight.empty()) settle_one();
  }
  // Settles the steps up to `state`'s (StepLoss::get).
  void settle_through(const StepLoss::State& state) {
    while (!state.settled && !in_flight.empty()) settle_one();
  }
  ~ModelCore() {
    // The StepLosses outlive the model: each gets its loss or its error. Nothing may escape a destructor.
    while (!in_flight.empty()) {
      try {
        settle_one();
      } catch (...) {
      }
    }
  }
  ModelCore(const ModelCore&) = delete;
  ModelCore& operator=(const ModelCore&) = delete;

 private:
  struct InFlight {
    std::shared_ptr<StepLoss::State> state;
    uint64_t read;    // Backend::read_later: the per-row losses, then the sums (two doubles); 0: none (read now)
    size_t rows;      // per-row losses
    long long count;  // rows that count
    uint64_t passes;  // the dropout passes after the step
    CSpan losses = {}, sums = {};  // where they are on the device
  };
  // f's per-row losses then sums into host: its read_later's copy, or (read 0) read now.
  void read_back(const InFlight& f, std::span<float> host) {
    if (f.read != 0) return ops().take(f.read, host);
    ops().download(host.data(), f.losses.data(), f.losses.size_bytes());
    ops().download(host.data() + f.rows, f.sums.data(), f.sums.size_bytes());
  }
  std::deque<InFlight> in_flight;
  std::vector<float> settle_floats;

  // The oldest step in flight: its loss and sums read back (waits), then the optimizer's answer, as train_step's.
  void settle_one() {
    InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    f.state->core = nullptr;
    f.state->settled = true;
    std::vector<float>& host = settle_floats;
    host.resize(f.rows + 4);
    try {
      read_back(f, host);
    } catch (...) {
      // The device failed (its error names the op): this step and those behind it answer with it.
      f.state->error = std::current_exception();
      drop_in_flight(f);
      throw;
    }
    double sum = 0.0;
    for (size_t i = 0; i < f.rows; ++i) sum += host[i];  // read_loss's order
    const float loss = static_cast<float>(sum / static_cast<double>(f.count));
    std::array<double, 2> sums;
    std::memcpy(sums.data(), host.data() + f.rows, sizeof sums);
    const bool last = in_flight.empty();
    f.state->loss = loss;
    try {
      if (!std::isfinite(loss)) {
        if (opt().config().non_finite == NonFinite::Error) {
          trained().zero_grad();
          check_loss(loss);  // throws: caught below
        }
        f.state->skipped = !opt().settle(trained(), false, sums, last);
        return;
      }
      // Throws for a non-finite norm under NonFinite::Error.
      f.state->skipped = !opt().settle(trained(), true, sums, last);
    } catch (...) {
      // NonFinite::Error: this step's error; the steps behind it wrote nothing (the device halted them).
      f.state->error = std::current_exception();
      drop_in_flight(f);
      throw;
    }
  }
  // The steps queued behind f, which threw: they are read (their copies were queued) and answer with an error.
  void drop_in_flight(const InFlight& f) {
    std::string why = "an earlier step's error";
    try {
      std::rethrow_exception(f.state->error);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    const auto error = std::make_exception_ptr(
        Error(detail::cat("this training step did not run: a step queued before it stopped training (", why, ")")));
    const bool dropped = !in_flight.empty();
    while (!in_flight.empty()) {
      InFlight d = std::move(in_flight.front());
      in_flight.pop_front();
      settle_floats.resize(d.rows + 4);
      try {
        if (d.read != 0) ops().take(d.read, settle_floats);  // only to release the copy: the step did not run
      } catch (...) {
      }
      d.state->core = nullptr;
      d.state->settled = true;
      d.state->loss = std::numeric_limits<float>::quiet_NaN();
      d.state->error = error;
    }
    opt().drop_ahead();
    opt().end_halt();
    passes = f.passes;                   // the dropped steps' passes are run again by the next steps
    if (dropped) trained().zero_grad();  // they were a dropped step's, not the refused one's
  }

  // The step's ops between begin_step and end_step. A StepRetry (the backend's replay met a different step, or
  // its capture failed: nothing of it ran), or an exception from a capture that broke, runs the step again from
  // the same dropout seeds, op by op (begin_step(0)).
  template <class ForwardLoss, class Backward>
  PendingLoss queue_step(uint64_t key, uint64_t passes_before, ForwardLoss& forward_loss, Backward& backward,
                         bool ahead = false) {
    ops::Backend& b = ops();
    opt().reserve(trained());  // outside the step: nothing inside it may allocate
    const int ahead_before = opt().ahead();
    for (int attempt = 0;; ++attempt) {
      passes = passes_before;
      // A step run again, or one that failed, was not queued: it is not in flight.
      opt().set_ahead(ahead_before);
      b.begin_step(attempt == 0 ? key : 0);
      try {
        const PendingLoss pending = forward_loss();
        backward();
        // No row counts: the loss is NaN whatever the device computes, and no update may happen.
        if (pending.count > 0) {
          if (ahead) {
            opt().queue_ahead(trained(), pending.losses);
          } else {
            opt().queue(trained(), pending.losses);
          }
        }
        b.end_step();
        return pending;
      } catch (const ops::StepRetry&) {
        b.cancel_step();
        check(attempt == 0, "the training step could not be queued: the backend asked to run it again twice");
      } catch (...) {
        if (!b.cancel_step() || attempt > 0) {
          opt().set_ahead(ahead_before);
          throw;
        }
      }
    }
  }
  // What the step's ops depend on beyond the model's shape: which model (a new model may get a freed model's
  // addresses, and its first step must run op by op: it makes what the model keeps), where its weights live, and
  // whether dropout is on, and whether the layers are recomputed (more ops).
  uint64_t step_key() const {
    const auto at = reinterpret_cast<uintptr_t>(const_cast<nn::Parameters&>(params).values().data());
    // With adapters the step also reads and writes theirs: a new adapter set is a new step.
    const auto adapters =
        lora ? reinterpret_cast<uintptr_t>(const_cast<nn::Parameters&>(lora->params).values().data()) : 0;
    return (static_cast<uint64_t>(at) * 0x9E3779B97F4A7C15ull) ^
           (static_cast<uint64_t>(adapters) * 0xD6E8FEB86659FD93ull) ^ (lora_changes << 40) ^
           (id * 0xC2B2AE3D27D4EB4Full) ^ (training ? 1u : 0u) ^
           (static_cast<uint64_t>(std::hash<float>{}(dropout)) << 1) ^ (recomputes() ? uint64_t{1} << 63 : 0);
  }
  static uint64_t next_id() {
    static std::atomic<uint64_t> n{0};
    return ++n;
  }
  const uint64_t id = next_id();

 public:
  MemoryUsage memory() const {
    // The float32 weights and the packed ones (Parameters::quantize), and the adapters' (LoRA).
    const size_t weights = params.weight_bytes() + (lora ? lora->params.weight_bytes() : 0);
    // The moments: this replica's part under ZeRO-1 (parallel/). A loaded model has neither gradients nor moments
    // until it trains (nn::Parameters::ForLoading); a quantized one never has. With adapters, only theirs: the base
    // is frozen.
    const nn::Parameters& t = trained();
    const size_t grads = t.has_training() ? t.count() * sizeof(float) : 0;
    return {weights, grads, 2 * t.moments_size() * sizeof(float), ws.size_bytes()};
  }

  // The ids of a batch on the device: validated host ids in, the Ids the ops take out (dst: ws.take_ints).
  ops::Ids ids(std::span<int32_t> dst, std::span<const int32_t> host) { return ops::upload_ids(ops(), dst, host); }

  // (B,T) padding flags from token ids (1 where the id is pad_id), made on the host and placed in dst, the
  // model's device buffer (ws.take_bytes) that attention reads as key_pad.
  const uint8_t* pad_flags(std::span<uint8_t> dst, std::span<const int32_t> ids, int pad_id) {
    std::vector<uint8_t>& host = pad_staging;
    host.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) host[i] = ids[i] == pad_id ? 1 : 0;
    if (device() == Device::CPU) {
      std::copy(host.begin(), host.end(), dst.begin());
    } else {
      ops().upload(dst.data(), host.data(), host.size());
    }
    return dst.data();
  }
  std::vector<uint8_t> pad_staging;

  size_t num_parameters() const {
    size_t n = 0;
    for (const nn::Param& p : params.all()) n += p.numel;
    return n;
  }
};

// A training step's shape as ModelCore::train_step's key.
inline uint64_t shape_key(std::initializer_list<int> dims) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the dimensions
  for (int d : dims) h = (h ^ static_cast<uint32_t>(d)) * 0x100000001b3ull;
  return h;
}

inline void check_positive(int value, const char* name) {
  check(value >= 1, name, " = ", value, " is invalid: expected an integer >= 1");
}

// The checks every model's config shares: the stack's shape and the dropout rate.
template <class Config>
void check_stack(const Config& c) {
  check_positive(c.context, "context");
  check_positive(c.d_model, "d_model");
  check_positive(c.heads, "heads");
  check(c.d_model % c.heads == 0, "d_model = ", c.d_model, " must be divisible by heads = ", c.heads);
  check(c.d_ff >= 0, "d_ff = ", c.d_ff, " is invalid: expected an integer >= 1 (or 0 for 4 * d_model)");
  check(c.dropout >= 0.f && c.dropout < 1.f, "dropout = ", c.dropout, " is invalid: expected 0 <= dropout < 1");
}

// Token ids must lie in [0, V); ids equal to `allowed` (e.g. an ignore index) pass too.
inline void check_ids(std::span<const int32_t> ids, const char* what, int V, int allowed = INT32_MIN) {
  for (size_t i = 0; i < ids.size(); ++i)
    check((ids[i] >= 0 && ids[i] < V) || ids[i] == allowed, what, "[", i, "] = ", ids[i],
          " is out of range: expected a token id in [0, ", V, ")");
}

inline void check_shape(std::span<const int32_t> ids, const char* what, int B, int T, const char* bname,
                        const char* tname) {
  const size_t n = static_cast<size_t>(B) * T;
  check(ids.size() == n, what, " has ", ids.size(), " tokens: expected ", bname, " * ", tname, " = ", B, " * ", T,
        " = ", n);
}

inline void check_dims(int B, int T, int T_max, const char* tname, const char* max_name) {
  check(B >= 1, "batch = ", B, " is invalid: expected an integer >= 1");
  check(T >= 1 && T <= T_max, tname, " = ", T, " is invalid: expected 1 <= ", tname, " <= ", max_name, " = ", T_max);
}

}  // namespace qkv::models

namespace qkv::models {

// Why an output is not finite, said by evaluate() and logits() rather than returning NaN a caller may not look for.
inline constexpr const char* kNotFiniteWhy =
    "the model's weights overflow or hold NaN (a learning rate far too high, or a file that holds NaN)";

// logits() as returned: the first value that is not finite throws, naming it.
inline void check_finite_logits(std::span<const float> logits) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isfinite(logits[i]))
      throw NonFiniteError(detail::cat("logits[", i, "] = ", logits[i], " is not finite: ", kNotFiniteWhy));
}

// Sums of a cross-entropy evaluation: loss over counted rows, argmax hits, rows counted (not ignored).
struct LossSum {
  double loss = 0.0;
  long long correct = 0, count = 0;

  // evaluate()'s answer; a loss that is not finite throws (an evaluation that counts nothing has none).
  Metrics metrics() const {
    if (count > 0 && !std::isfinite(loss))
      throw NonFiniteError(
          detail::cat("evaluate: the loss is ", loss / static_cast<double>(count), ", not finite: ", kNotFiniteWhy));
    Metrics m;
    m.count = count;
    m.loss = count ? loss / static_cast<double>(count) : 0.0;
    m.accuracy = count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
    m.perplexity = std::exp(m.loss);
    return m;
  }
};

// Evaluation: the cross-entropy of logits (rows, V) against targets, and the argmax hits for accuracy. losses
// (rows) and best (rows) are device buffers; the sums are made on the host from what comes back.
inline LossSum cross_entropy(ModelCore& core, Span losses, std::span<int32_t> best, CSpan logits,
                             const ops::Ids& targets, int rows, int V, int ignore_index, float smoothing) {
  ops::Backend& ops = core.ops();
  ops.crossentropy_forward(losses, logits, targets, rows, V, ignore_index, smoothing);
  ops.argmax_rows(best.first(static_cast<size_t>(rows)), logits, rows, V);
  const CSpan l = core.to_host(CSpan(losses.first(static_cast<size_t>(rows))), core.host_floats);
  const std::span<const int32_t> hit = core.to_host(std::span<const int32_t>(best.first(rows)), core.host_ints);
  LossSum s;
  for (int r = 0; r < rows; ++r) {
    if (targets.host[static_cast<size_t>(r)] == ignore_index) continue;
    s.loss += l[static_cast<size_t>(r)];
    ++s.count;
    s.correct += hit[static_cast<size_t>(r)] == targets.host[static_cast<size_t>(r)];
  }
  return s;
}

// Training: the loss and, in the same sweep, dlogits = weight * d(mean loss)/d logits, the mean over the rows
// whose target is not ignore_index. logits is overwritten with dlogits. Nothing is read back: the loss stays on
// the device until ModelCore::read_loss (the logits are gone, so no hits are counted). A batch whose targets are
// all ignored gets count 0 and a zero gradient.
inline ModelCore::PendingLoss cross_entropy_with_gradient(ModelCore& core, Span logits, Span losses,
                                                          const ops::Ids& targets, float weight, int rows, int V,
                                                          int ignore_index, float smoothing) {
  ModelCore::PendingLoss l{CSpan(losses.first(static_cast<size_t>(rows))), 0};
  for (int r = 0; r < rows; ++r) l.count += targets.host[static_cast<size_t>(r)] != ignore_index;
  const float scale = l.count ? weight / static_cast<float>(l.count) : 0.f;
  core.ops().crossentropy_forward_backward(losses, logits, logits, targets, scale, rows, V, ignore_index, smoothing);
  return l;
}

}  // namespace qkv::models
