#pragma once
// A training step launched as one CUDA graph (ops.h: Backend::begin_step; the bookkeeping is ops/step_recorder.h's).
// Pure C++: the CUDA types stay in step_graph.cpp.
//
// Per key (a step's shape): the first step runs op by op and plans every buffer; the next is captured (the ops
// are recorded on qkv's stream, not run) and launched as a graph; later ones replay it: the host walks the same
// model code, but every op only checks its arguments against the captured ones and queues nothing, and the graph
// is launched at the end. Up to ops::StepRecorder::kMaxGraphs keys keep their graphs.
//
// What changes from step to step without changing the graph: the values the kernels read from the scalar block
// (dropout seeds, the loss's 1/count, Adam's lr and bias corrections: scalar() stages them) and the host bytes
// the step uploads (the optimizer's ranges: upload() stages them). Both go into one pinned block, copied to its
// device twin by a single cudaMemcpyAsync ahead of each launch; the graph reads the twin.
//
// A replay that meets an op with other arguments than the captured one (a pointer or a size changed under the
// same key), or a capture that fails, throws ops::StepRetry before anything ran: the model runs the step again,
// and begin(0) makes that run op by op.
//
// Threads: one step at a time (begin holds a lock until end or cancel, so a second thread's step waits), and only
// the thread whose step it is sees it active. The capture is of qkv's one stream, though: kernels another thread
// queues on it while a step is captured would be captured with it (and never run), and that thread's synchronous
// calls on the legacy stream (cudaMemcpy, cudaMemset, a device synchronize), which qkv's blocking stream is ordered
// with, fail and break the capture (the step then runs op by op, and its key never again as a graph). A process
// that uses the GPU from several threads at once runs with QKV_CUDA_GRAPH=0.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

#include "ops/adam_plan.h"
#include "ops/step_recorder.h"

namespace qkv::kernels::cuda {

class StepGraph {
 public:
  StepGraph() = default;
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;
  ~StepGraph();

  // Capture and replay on (the default) or off (QKV_CUDA_GRAPH=0, or set_enabled(false): every step op by op).
  void set_enabled(bool on);
  bool enabled() const { return recorder_.enabled(); }

  // key 0: op by op whatever was seen before (the retry of a step).
  void begin(uint64_t key);
  // Capture: ends it, instantiates the graph and launches it; replay: checks the walk was the captured one and
  // launches; op by op: nothing.
  void end();
  // After an exception inside the step: ends a capture (discarding it); never throws. True when the capture
  // itself had broken (the exception is then likely CUDA's refusal of a call in it): the key is run op by op
  // from then on, and the step should be run again. A replay's exception left nothing run.
  bool cancel() noexcept;

  bool active() const {
    return owner_.load(std::memory_order_relaxed) == std::this_thread::get_id() && recorder_.active();
  }

  // Every op of a step calls this first, with ops::StepSignature's hash of the arguments its nodes bake in: true
  // in a replay (run nothing; StepRetry where it differs from the capture's), false otherwise (queue the op).
  bool skip(uint64_t signature);

  // A device address holding `value` for the step's kernels: null outside a captured or replayed step (the
  // kernels take the value itself), else a slot of the scalar block staged with it.
  template <class T>
  const T* scalar(const T& value) {
    return static_cast<const T*>(stage(&value, sizeof(T), alignof(T)));
  }

  // Inside an active step: host bytes for dst, staged in the block and copied from its twin by the graph (a
  // device-to-device node); counts as an op. Outside: false (the caller copies as usual).
  bool upload(void* dst, const void* src, size_t bytes);

  // Steps captured, replayed, run again after a StepRetry: for tests and benchmarks.
  const ops::StepRecorder::Counts& counts() const { return recorder_.counts(); }

 private:
  const void* stage(const void* bytes, size_t size, size_t align);
  [[noreturn]] void retry(bool forget_key);
  static void destroy(void* exec) noexcept;  // a cudaGraphExec_t, or null
  void launch(const char* op);
  void ensure_block();
  void release() noexcept;  // the step's end: the lock and the owner go

  ops::StepRecorder recorder_;  // the graphs' handles are their cudaGraphExec_t
  std::mutex step_;             // held from begin to end or cancel
  std::atomic<std::thread::id> owner_{};

  // The pinned blocks, one per step that may be in flight (models/model_core.h: queue_train_step), used in turn: a
  // step's walk rewrites its block only once the copy out of it, kRing steps ago, is done, so the host waits for
  // the step before last's start, not for the last one. One device twin: each copy into it is queued behind the
  // graph that read it.
  static constexpr size_t kBlockBytes = size_t{1} << 20;
  static constexpr int kRing = ops::kMaxStepsAhead + 1;
  unsigned char* pinned_[kRing] = {};  // cudaMallocHost
  void* copied_[kRing] = {};           // cudaEvent_t: the last copy out of pinned_[i] is done
  unsigned char* device_ = nullptr;    // the twin, cudaMalloc
  int slot_ = 0;                       // the block of the step under way
};

// The process's step graph (the CUDA backend's): the tests and benchmarks read its counts and switch it.
StepGraph& step_graph();

}  // namespace qkv::kernels::cuda
