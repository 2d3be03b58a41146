#pragma once
// A training step launched as one CUDA graph (ops.h: Backend::begin_step). Pure C++: the CUDA types stay in
// step_graph.cpp.
//
// Per key (a step's shape): the first step runs op by op (Eager) and plans every buffer; the second is captured
// (Capture: the ops are recorded on qkv's stream, not run) and then launched as a graph; later ones replay it
// (Replay: the host walks the same model code, but every op only checks its arguments against the captured
// ones and runs nothing, and the graph is launched at the end). A key that changes drops nothing until a new
// capture replaces the graph; a key whose capture failed is run eagerly from then on.
//
// What changes from step to step without changing the graph: the values the kernels read from the scalar block
// (dropout seeds, the loss's 1/count, Adam's lr and bias corrections: scalar() stages them) and the host bytes
// the step uploads (the optimizer's ranges: upload() stages them). Both go into one pinned block, copied to its
// device twin by a single cudaMemcpyAsync ahead of each launch; the graph reads the twin. The walk of a replay
// writes the block at the offsets the capture used, in the same order, which the op count and the block's size
// check at the end.
//
// A replay that meets an op with other arguments than the captured one (a pointer or a size changed under the
// same key), or a capture that fails, throws ops::StepRetry before anything ran: the model runs the step again,
// and begin(0) makes that run eager.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace qkv::kernels::cuda {

class StepGraph {
 public:
  StepGraph() = default;
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;
  ~StepGraph();

  // Capture and replay on (the default) or off (QKV_CUDA_GRAPH=0, or set_enabled(false): every step eager).
  void set_enabled(bool on);
  bool enabled() const { return enabled_; }

  // key 0: eager whatever was seen before (the retry of a step).
  void begin(uint64_t key);
  // Capture: ends it, instantiates the graph and launches it; replay: checks the walk was the captured one and
  // launches; eager: nothing.
  void end();
  // After an exception inside the step: ends a capture (discarding it); never throws. True when the capture
  // itself had broken (the exception is then likely CUDA's refusal of a call in it): the key is run eagerly from
  // then on, and the step should be run again op by op. A replay's exception left nothing run.
  bool cancel() noexcept;

  bool capturing() const { return mode_ == Mode::Capture; }
  bool replaying() const { return mode_ == Mode::Replay; }
  bool active() const { return mode_ == Mode::Capture || mode_ == Mode::Replay; }

  // Every op of a step calls this first, with a hash of the arguments its graph nodes bake in. Capture records
  // it and returns false (queue the op); replay compares it with the capture's and returns true (run nothing),
  // or throws StepRetry where it differs; eager returns false.
  bool skip(uint64_t signature);

  // A device address holding `value` for the step's kernels: null when eager (the kernels take the value
  // itself), else a slot of the scalar block staged with it.
  template <class T>
  const T* scalar(const T& value) {
    return static_cast<const T*>(stage(&value, sizeof(T), alignof(T)));
  }

  // Inside an active step: host bytes for dst, staged in the block and copied from its twin by the graph (a
  // device-to-device node); counts as an op (skip() included). Outside: false (the caller copies as usual).
  bool upload(void* dst, const void* src, size_t bytes);

  // Counters for tests and benchmarks: steps captured, steps replayed, steps run again after a StepRetry.
  struct Counts {
    long long captured = 0, replayed = 0, retried = 0;
  };
  const Counts& counts() const { return counts_; }

 private:
  enum class Mode { Off, Eager, Capture, Replay };
  const void* stage(const void* bytes, size_t size, size_t align);
  [[noreturn]] void retry(bool forget_key);
  void drop_graph() noexcept;
  void launch(const char* op);
  void ensure_block();

  bool enabled_ = true;
  Mode mode_ = Mode::Off;
  uint64_t key_ = 0;                   // this step's
  uint64_t seen_key_ = 0;              // the last eager step's: its next step is captured
  uint64_t graph_key_ = 0;             // the instantiated graph's
  std::vector<uint64_t> failed_keys_;  // captures that failed: eager from then on

  void* exec_ = nullptr;              // cudaGraphExec_t
  std::vector<uint64_t> signatures_;  // the captured walk, op by op
  size_t graph_used_ = 0;             // its block bytes
  size_t cursor_ = 0;                 // ops walked in this step
  size_t used_ = 0;                   // block bytes staged in this step

  static constexpr size_t kBlockBytes = size_t{1} << 20;
  unsigned char* pinned_ = nullptr;  // cudaMallocHost
  unsigned char* device_ = nullptr;  // its twin, cudaMalloc
  void* copied_ = nullptr;           // cudaEvent_t: the last copy out of pinned_ is done (before it is rewritten)
  Counts counts_;
};

// The process's step graph (the CUDA backend's): the tests and benchmarks read its counts and switch it.
StepGraph& step_graph();

}  // namespace qkv::kernels::cuda
