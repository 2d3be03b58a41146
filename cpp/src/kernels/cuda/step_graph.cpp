#include "kernels/cuda/step_graph.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"
#include "ops/ops.h"

namespace qkv::kernels::cuda {

StepGraph::~StepGraph() {
  // The process's graph lives until exit, when the driver may already be gone: errors are ignored.
  drop_graph();
  if (copied_) cudaEventDestroy(static_cast<cudaEvent_t>(copied_));
  if (device_) cudaFree(device_);
  if (pinned_) cudaFreeHost(pinned_);
  cudaGetLastError();
}

void StepGraph::set_enabled(bool on) {
  enabled_ = on;
  if (!on) drop_graph();
}

void StepGraph::ensure_block() {
  if (pinned_) return;
  const char* op = "training step graph";
  void* host = nullptr;
  check_cuda(cudaMallocHost(&host, kBlockBytes), op, "cudaMallocHost");
  pinned_ = static_cast<unsigned char*>(host);
  void* dev = nullptr;
  check_cuda(cudaMalloc(&dev, kBlockBytes), op, "cudaMalloc");
  device_ = static_cast<unsigned char*>(dev);
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), op, "cudaEventCreateWithFlags");
  copied_ = event;
}

void StepGraph::begin(uint64_t key) {
  key_ = key;
  cursor_ = used_ = 0;
  mode_ = Mode::Eager;
  if (!enabled_ || key == 0) return;
  if (std::find(failed_keys_.begin(), failed_keys_.end(), key) != failed_keys_.end()) return;
  const bool replay = exec_ && key == graph_key_;
  if (!replay && key != seen_key_) {
    seen_key_ = key;  // its next step is captured
    return;
  }
  const char* op = "training step graph";
  ensure_block();
  // The block is rewritten by this step's walk: the copy out of it for the last launch must be done.
  check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(copied_)), op, "cudaEventSynchronize");
  if (replay) {
    mode_ = Mode::Replay;
    return;
  }
  signatures_.clear();
  // Thread-local: only this thread's unsafe calls (a synchronous copy, a wait) break the capture; others go on.
  check_cuda(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), op, "cudaStreamBeginCapture");
  mode_ = Mode::Capture;
}

bool StepGraph::skip(uint64_t signature) {
  if (mode_ == Mode::Capture) {
    signatures_.push_back(signature);
    return false;
  }
  if (mode_ != Mode::Replay) return false;
  if (cursor_ >= signatures_.size() || signatures_[cursor_] != signature) retry(false);
  ++cursor_;
  return true;
}

const void* StepGraph::stage(const void* bytes, size_t size, size_t align) {
  if (!active()) return nullptr;
  const size_t at = (used_ + align - 1) / align * align;
  if (at + size > kBlockBytes) retry(true);  // a step that stages this much is not worth a graph
  std::memcpy(pinned_ + at, bytes, size);
  used_ = at + size;
  return device_ + at;
}

bool StepGraph::upload(void* dst, const void* src, size_t bytes) {
  if (!active()) return false;
  uint64_t sig = 0xcbf29ce484222325ull;
  for (uint64_t word : {static_cast<uint64_t>(reinterpret_cast<uintptr_t>(dst)), static_cast<uint64_t>(bytes)})
    sig = (sig ^ word) * 0x100000001b3ull;
  const bool replay = skip(sig);
  const void* from = stage(src, bytes, 16);
  if (!replay && bytes)
    check_cuda(cudaMemcpyAsync(dst, from, bytes, cudaMemcpyDeviceToDevice, stream()), "upload", "cudaMemcpyAsync");
  return true;
}

void StepGraph::end() {
  const Mode mode = mode_;
  if (mode == Mode::Replay) {
    if (cursor_ != signatures_.size() || used_ != graph_used_) retry(false);
    ++counts_.replayed;
    launch("training step graph");
    return;
  }
  mode_ = Mode::Off;
  if (mode != Mode::Capture) return;
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream(), &graph);
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess && graph) e = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  if (e != cudaSuccess || !exec) {
    cudaGetLastError();
    retry(true);  // mode_ is Off: the capture is over already
  }
  drop_graph();
  exec_ = exec;
  graph_key_ = key_;
  graph_used_ = used_;
  ++counts_.captured;
  launch("training step graph");
}

void StepGraph::launch(const char* op) {
  mode_ = Mode::Off;
  if (used_)
    check_cuda(cudaMemcpyAsync(device_, pinned_, used_, cudaMemcpyHostToDevice, stream()), op, "cudaMemcpyAsync");
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(copied_), stream()), op, "cudaEventRecord");
  check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream()), op, "cudaGraphLaunch");
  check_launch(op);
}

void StepGraph::retry(bool forget_key) {
  if (mode_ == Mode::Capture) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream(), &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();
  } else if (mode_ == Mode::Replay) {
    drop_graph();  // the same key went another way: captured again at its next step
  }
  if (forget_key) failed_keys_.push_back(key_);
  mode_ = Mode::Off;
  ++counts_.retried;
  throw ops::StepRetry();
}

bool StepGraph::cancel() noexcept {
  bool broken = false;
  if (mode_ == Mode::Capture) {
    // Invalidated: a call this thread made broke the capture (the exception is likely CUDA's refusal of it),
    // so the key is not captured again. Still active: the exception is the step's own (bad input).
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    broken = cudaStreamIsCapturing(stream(), &status) != cudaSuccess || status == cudaStreamCaptureStatusInvalidated;
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream(), &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    if (broken) {
      failed_keys_.push_back(key_);
      ++counts_.retried;
    }
  }
  mode_ = Mode::Off;
  return broken;
}

void StepGraph::drop_graph() noexcept {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  exec_ = nullptr;
  graph_key_ = 0;
  signatures_.clear();
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
