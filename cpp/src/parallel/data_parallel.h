#pragma once
// Data-parallel training: each rank holds a whole replica of the model and runs the backward of its slice of
// the global batch; DataParallel sums the gradients of every rank before the optimizer step (PyTorch DDP's
// scheme). The flat gradient buffer is cut into buckets from its end; a bucket's sum starts as soon as the
// backward has made every gradient in it final (nn::Parameters::on_grads_final), so the communication of the
// last layers overlaps the backward of the first. Buckets start strictly in order (from the end), so every rank
// starts the same reductions in the same order, also a rank that ran no backward (a skipped non-finite loss).
//
// One accumulate() per apply_gradients() with overlap on: a second backward before the step is refused (its
// gradients would add to buckets already being summed); with overlap off every bucket is summed in reduce().
#include <cstddef>
#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/sync.h"

namespace qkv::dist {

struct DataParallelOptions {
  size_t bucket_bytes = size_t{1} << 20;
  bool overlap = true;
  // After every step, every rank's parameters are compared (a hash, reduced): qkv::Error when they differ.
  bool check_replicas = false;
  // ZeRO-1: each rank keeps and updates the Adam moments of 1/N of the layout only (nn::Parameters::
  // shard_moments), then the updated parameters are all-gathered. Saves 2 (N - 1) / N of the moments' memory
  // per rank for one all-gather of the parameters per step; the values are the same bits as without it.
  bool zero1 = false;
};

// Time spent in communication, for the benchmarks: `issue` in the calls that start and advance the
// reductions during the backward, `wait` blocked in reduce() for what was left (the communication the
// backward did not hide), `agree` in the small all-reduce of the loss flag.
struct CommStats {
  long long steps = 0, buckets = 0;
  double bytes = 0.0, issue_s = 0.0, wait_s = 0.0, agree_s = 0.0;
  double gather_s = 0.0;  // ZeRO-1: the all-gather of the parameters after the step
};

class DataParallel final : public GradientSync {
 public:
  DataParallel(Communicator& comm, const DataParallelOptions& options = {});
  ~DataParallel() override;

  void attach(nn::Parameters& params) override;
  void detach(nn::Parameters& params) override;
  bool reduce(nn::Parameters& params, bool finite_loss) override;
  void after_step(nn::Parameters& params) override;

  Communicator& comm() { return comm_; }
  // ZeRO-1: every rank's moments gathered into every rank (whole again: to save a checkpoint), and sharded again.
  // Both are collective: every rank calls them at the same point.
  void gather_moments();
  void shard_moments();
  // The range of the layout whose moments rank r keeps (ZeRO-1), [bounds()[r], bounds()[r + 1]).
  const std::vector<size_t>& bounds() const { return bounds_; }
  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }
  size_t buckets() const { return buckets_.size(); }

 private:
  struct Bucket {
    size_t begin, end;  // floats of the flat buffer
  };
  void plan(size_t total);
  void grads_final(nn::Parameters& params, size_t offset);
  void launch(nn::Parameters& params, size_t k);

  Communicator& comm_;
  DataParallelOptions options_;
  std::vector<Bucket> buckets_;  // buckets_[0] ends at the end of the buffer
  std::vector<size_t> bounds_;   // ZeRO-1: size() + 1 piece bounds over the layout
  nn::Parameters* params_ = nullptr;
  std::vector<int> requests_;  // of the buckets launched in this step
  size_t planned_for_ = 0;
  size_t last_offset_ = SIZE_MAX;  // of this backward's last signal
  CommStats stats_;
};

}  // namespace qkv::dist
