// parallel/nccl.h (QKV_NCCL builds).
#include "parallel/nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/stream.h"
#include "qkv/error.h"

namespace qkv::dist {
namespace {

void ok(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw Error(detail::cat(call, " failed: ", ncclGetErrorString(r)));
}
void ok(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw Error(detail::cat(call, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::unique_ptr<Communicator> host) : host_(std::move(host)) {
    ncclUniqueId id;
    std::string bytes;
    if (host_->rank() == 0) {
      ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
      bytes.assign(reinterpret_cast<const char*>(&id), sizeof id);
    }
    host_->broadcast(bytes, 0);
    check(bytes.size() == sizeof id, "the NCCL id broadcast over MPI has ", bytes.size(), " bytes: expected ",
          sizeof id);
    std::memcpy(&id, bytes.data(), sizeof id);
    ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    ok(ncclCommInitRank(&comm_, host_->size(), id, host_->rank()), "ncclCommInitRank");
  }
  ~NcclCommunicator() override {
    // As the MPI communicator: with sums in flight (an exception midway), nothing that could wait is called.
    if (in_flight_ == 0) {
      ncclCommDestroy(comm_);
      for (Pending& p : requests_) {
        cudaEventDestroy(p.ready);
        cudaEventDestroy(p.done);
      }
      cudaStreamDestroy(stream_);
    }
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string name() const override { return detail::cat("nccl (", size(), size() == 1 ? " rank)" : " ranks)"); }

  // After the work queued so far on qkv's stream (kernels/cuda/stream.h: the backward that made these gradients), on
  // our stream.
  int start_sum(Span x) override {
    const size_t r = next_++;
    if (r == requests_.size()) {
      Pending p{};
      ok(cudaEventCreateWithFlags(&p.ready, cudaEventDisableTiming), "cudaEventCreate");
      ok(cudaEventCreateWithFlags(&p.done, cudaEventDisableTiming), "cudaEventCreate");
      requests_.push_back(p);
    }
    Pending& p = requests_[r];
    ok(cudaEventRecord(p.ready, kernels::cuda::stream()), "cudaEventRecord");
    ok(cudaStreamWaitEvent(stream_, p.ready, 0), "cudaStreamWaitEvent");
    ok(ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
    ok(cudaEventRecord(p.done, stream_), "cudaEventRecord");
    p.waiting = true;
    ++in_flight_;
    return static_cast<int>(r);
  }
  bool test(int r) override {
    Pending& p = requests_[static_cast<size_t>(r)];
    if (!p.waiting) return true;
    const cudaError_t e = cudaEventQuery(p.done);
    if (e == cudaErrorNotReady) {
      // Not an error, but it may be kept as the thread's last one, which qkv's next launch check would report.
      if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
      return false;
    }
    ok(e, "cudaEventQuery");
    return true;
  }
  // qkv's stream waits for the sum (the optimizer's kernels follow it); the host does not.
  void wait(int r) override {
    Pending& p = requests_[static_cast<size_t>(r)];
    if (!p.waiting) return;
    ok(cudaStreamWaitEvent(kernels::cuda::stream(), p.done, 0), "cudaStreamWaitEvent");
    p.waiting = false;
    --in_flight_;
  }
  void reset() override {
    check(in_flight_ == 0, "Communicator::reset() with a reduction in flight");
    next_ = 0;
  }
  // Rank r's piece broadcast from r, in place: pieces may differ in size (ncclAllGather's may not).
  void all_gather(Span x, std::span<const size_t> bounds) override {
    check(bounds.size() == static_cast<size_t>(size()) + 1 && bounds.back() <= x.size(), "all_gather: expected ",
          size() + 1, " bounds within ", x.size(), " floats");
    ok(cudaEventRecord(gather_ready(), kernels::cuda::stream()), "cudaEventRecord");
    ok(cudaStreamWaitEvent(stream_, gather_ready(), 0), "cudaStreamWaitEvent");
    ok(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r) {
      float* piece = x.data() + bounds[static_cast<size_t>(r)];
      const size_t n = bounds[static_cast<size_t>(r) + 1] - bounds[static_cast<size_t>(r)];
      ok(ncclBroadcast(piece, piece, n, ncclFloat, r, comm_, stream_), "ncclBroadcast");
    }
    ok(ncclGroupEnd(), "ncclGroupEnd");
    ok(cudaEventRecord(gather_ready(), stream_), "cudaEventRecord");
    ok(cudaStreamWaitEvent(kernels::cuda::stream(), gather_ready(), 0), "cudaStreamWaitEvent");
  }

  void sum(std::span<double> x) override { host_->sum(x); }
  void max(std::span<int64_t> x) override { host_->max(x); }
  void broadcast(std::string& s, int root) override { host_->broadcast(s, root); }

 private:
  struct Pending {
    cudaEvent_t ready, done;
    bool waiting;
  };
  cudaEvent_t gather_ready() {
    if (!gather_event_) ok(cudaEventCreateWithFlags(&gather_event_, cudaEventDisableTiming), "cudaEventCreate");
    return gather_event_;
  }

  std::unique_ptr<Communicator> host_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t gather_event_ = nullptr;
  std::vector<Pending> requests_;  // reused across steps
  size_t next_ = 0;
  int in_flight_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> nccl_world(std::unique_ptr<Communicator> host) {
  return std::make_unique<NcclCommunicator>(std::move(host));
}

int select_local_gpu() {
  int n = 0;
  ok(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  check(n > 0, "no CUDA device for this rank");
  int local = 0;
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* s = std::getenv(v)) {
      local = std::atoi(s);
      break;
    }
  const int device = local % n;
  ok(cudaSetDevice(device), "cudaSetDevice");
  return device;
}

}  // namespace qkv::dist
