#include "exec/cuda/step_graph.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"
#include "ops/ops.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {

using Mode = ops::StepRecorder::Mode;

StepGraph::~StepGraph() {
  // The process's graphs live until exit, when the driver may already be gone: errors are ignored.
  for (void* exec : recorder_.drop_all()) destroy(exec);
  for (int i = 0; i < kRing; ++i) {
    if (copied_[i]) cudaEventDestroy(static_cast<cudaEvent_t>(copied_[i]));
    if (pinned_[i]) cudaFreeHost(pinned_[i]);
  }
  if (device_) cudaFree(device_);
  cudaGetLastError();
}

void StepGraph::set_enabled(bool on) {
  const std::lock_guard<std::mutex> lock(step_);  // between steps: one under way in another thread ends first
  for (void* exec : recorder_.set_enabled(on)) destroy(exec);
}

void StepGraph::ensure_block() {
  if (copied_[kRing - 1]) return;  // the last made: all are
  const char* op = "training step graph";
  // Each made only once: a failure part way (out of pinned memory) leaves what was made for the next try.
  if (!device_) {
    void* dev = nullptr;
    check_cuda(cudaMalloc(&dev, kBlockBytes), op, "cudaMalloc");
    device_ = static_cast<unsigned char*>(dev);
  }
  for (int i = 0; i < kRing; ++i) {
    if (!pinned_[i]) {
      void* host = nullptr;
      check_cuda(cudaMallocHost(&host, kBlockBytes), op, "cudaMallocHost");
      pinned_[i] = static_cast<unsigned char*>(host);
    }
    if (!copied_[i]) {
      cudaEvent_t event = nullptr;
      check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), op, "cudaEventCreateWithFlags");
      copied_[i] = event;
    }
  }
  recorder_.set_block(pinned_[slot_], kBlockBytes);
}

void StepGraph::begin(uint64_t key) {
  const char* op = "training step graph";
  step_.lock();
  owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  try {
    // Before any capture: allocations have no place in one. Without the block (out of pinned memory) the step
    // runs op by op: the graph is an optimisation, not a reason for a step to fail.
    if (key != 0 && recorder_.enabled()) {
      try {
        ensure_block();
      } catch (const Error&) {
        key = 0;
      }
    }
    const Mode mode = recorder_.begin(key);
    if (mode == Mode::Eager) return;
    // This step's walk writes the next block of the ring: the copy out of it, kRing launches ago, must be done.
    slot_ = (slot_ + 1) % kRing;
    check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(copied_[slot_])), op, "cudaEventSynchronize");
    recorder_.set_block(pinned_[slot_], kBlockBytes);
    // Thread-local: only this thread's unsafe calls (a synchronous copy, a wait) break the capture; others go on.
    if (mode == Mode::Capture)
      check_cuda(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), op, "cudaStreamBeginCapture");
  } catch (...) {
    recorder_.end_eager();
    release();
    throw;
  }
}

void StepGraph::release() noexcept {
  owner_.store(std::thread::id{}, std::memory_order_relaxed);
  step_.unlock();
}

bool StepGraph::skip(uint64_t signature) {
  switch (recorder_.op(signature)) {
    case ops::StepRecorder::Op::Run: return false;
    case ops::StepRecorder::Op::Skip: return true;
    case ops::StepRecorder::Op::Diverged: break;
  }
  retry(false);
}

const void* StepGraph::stage(const void* bytes, size_t size, size_t align) {
  if (!active()) return nullptr;
  const size_t at = recorder_.stage(bytes, size, align);
  if (at == ops::StepRecorder::kNotStaged) retry(true);  // a step that stages this much is not worth a graph
  return device_ + at;
}

bool StepGraph::upload(void* dst, const void* src, size_t bytes) {
  if (!active()) return false;
  const bool replay = skip(ops::StepSignature::of("upload", dst, bytes));
  const void* from = stage(src, bytes, 16);
  if (!replay && bytes)
    check_cuda(cudaMemcpyAsync(dst, from, bytes, cudaMemcpyDeviceToDevice, stream()), "upload", "cudaMemcpyAsync");
  return true;
}

void StepGraph::end() {
  const char* op = "training step graph";
  const Mode mode = recorder_.mode();
  if (mode == Mode::Replay) {
    if (!recorder_.end_replay()) retry(false);
    launch(op);
    return;
  }
  if (mode != Mode::Capture) {
    recorder_.end_eager();
    release();
    return;
  }
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream(), &graph);
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess && graph) e = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  if (e != cudaSuccess || !exec) {
    cudaGetLastError();
    retry(true);
  }
  destroy(recorder_.captured(exec));
  launch(op);
}

void StepGraph::launch(const char* op) {
  // The step is over for the host either way: a launch that fails leaves the next step free to begin.
  struct Release {
    StepGraph* g;
    ~Release() { g->release(); }
  } release{this};
  // An error left by an earlier call is reported now, before anything of this step runs, not after its launch
  // (where the host would take the step for one that did not run).
  check_cuda(cudaGetLastError(), op, "an earlier call (before the graph's launch)");
  if (const size_t used = recorder_.used())
    check_cuda(cudaMemcpyAsync(device_, pinned_[slot_], used, cudaMemcpyHostToDevice, stream()), op, "cudaMemcpyAsync");
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(copied_[slot_]), stream()), op, "cudaEventRecord");
  check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(recorder_.handle()), stream()), op, "cudaGraphLaunch");
  check_launch(op);
}

void StepGraph::retry(bool forget_key) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream(), &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  }
  cudaGetLastError();
  destroy(recorder_.fail(forget_key));  // a replay's graph: the same key went another way, captured again next
  release();
  throw ops::StepRetry();
}

bool StepGraph::cancel() noexcept {
  // Not this thread's step (any more): a retry or a launch has ended it already.
  if (owner_.load(std::memory_order_relaxed) != std::this_thread::get_id()) return false;
  bool broken = false;
  if (recorder_.mode() == Mode::Capture) {
    // Invalidated: a call this thread made broke the capture (the exception is likely CUDA's refusal of it), so
    // the key is not captured again. Still active: the exception is the step's own (bad input).
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    broken = cudaStreamIsCapturing(stream(), &status) != cudaSuccess || status == cudaStreamCaptureStatusInvalidated;
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream(), &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
  if (broken) {
    destroy(recorder_.fail(true));
  } else {
    recorder_.end_eager();
  }
  release();
  return broken;
}

void StepGraph::destroy(void* exec) noexcept {
  if (exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

StepGraph& step_graph() {
  static StepGraph graph;
  static const bool configured = [] {
    const char* env = std::getenv("QKV_CUDA_GRAPH");
    if (env && std::strcmp(env, "0") == 0) graph.set_enabled(false);
    return true;
  }();
  (void)configured;
  return graph;
}

}  // namespace qkv::kernels::cuda
