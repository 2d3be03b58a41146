#pragma once
// A clipped Adam step queued while the steps before it are still undecided on the host (models/model_core.h:
// queue_train_step keeps up to kMaxStepsAhead steps in flight, their losses read later). Each step is taken or
// refused on the device (its losses and gradient norm finite or not), so the host that queues a step behind `ahead`
// undecided ones does not know its number: it is t0 + 1 + j, where t0 is the last step the host knows of and j how
// many of the steps ahead were taken. The host gives the hyper-parameters of every case (hyper[0 .. ahead]: the
// schedule's lr and the bias corrections of each t); the device counts the steps it takes (AdamState::taken) and the
// step uses hyper[taken - base], base being the count the host knew when it queued the step. With nothing ahead
// (every step the host reads before the next: ahead = 0) hyper[0] is the step's.
//
// NonFinite::Error (halt = 1): a refused step halts every step queued behind it (they write nothing), until the
// host, which throws the refusal's error when it reads that step, queues with a new epoch.
//
// One definition for the host (the CPU executor of tests/cpp/models/deferred_step_test.cpp) and the device
// (kernels/cuda/adamw.cuh's decision kernel).
#include "ops/dropout_hash.h"  // QKV_HOST_DEVICE
#include "ops/types.h"

namespace qkv::ops {

inline constexpr int kMaxStepsAhead = 2;

struct AdamPlan {
  AdamHyper hyper[kMaxStepsAhead + 1];
  int ahead = 0;  // 0 .. kMaxStepsAhead
  int base = 0;   // AdamState::taken when every step ahead is refused
  int epoch = 0;
  int halt = 0;  // 1: a refusal halts the steps behind it (NonFinite::Error)

  static AdamPlan of(const AdamHyper& h) {
    AdamPlan p{};
    p.hyper[0] = h;
    return p;
  }
};

// Kept on the device across steps (in the clipped step's scratch, zeroed when it is made).
struct AdamState {
  int taken;   // steps taken since the scratch was made
  int halted;  // epoch + 1 of the last halting refusal (0: none)
};

// The decision of a step whose sums are `finite` (or not): the index into hyper[] of the update, or -1 for none.
// Updates the state as the step does.
QKV_HOST_DEVICE inline int adam_pick(int ahead, int base, int epoch, int halt, bool finite, AdamState& state) {
  if (state.halted == epoch + 1) return -1;  // a step before this one was refused under NonFinite::Error
  if (!finite) {
    if (halt) state.halted = epoch + 1;
    return -1;
  }
  int j = ahead == 0 ? 0 : state.taken - base;
  // The host counts exactly what the device takes, so j is in [0, ahead]; kept in range whatever happens.
  j = j < 0 ? 0 : (j > ahead ? ahead : j);
  ++state.taken;
  return j;
}

}  // namespace qkv::ops
