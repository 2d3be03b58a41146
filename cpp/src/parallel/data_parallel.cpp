#include "parallel/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "qkv/error.h"

namespace qkv::dist {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// FNV-1a over the bytes of the values: equal on every rank exactly when the replicas agree (with overwhelming
// probability).
uint64_t hash_of(std::span<const float> x) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* b = reinterpret_cast<const unsigned char*>(x.data());
  for (size_t i = 0; i < x.size_bytes(); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace

DataParallel::DataParallel(Communicator& comm, const DataParallelOptions& options) : comm_(comm), options_(options) {
  check(options_.bucket_bytes >= 64, "bucket_bytes = ", options_.bucket_bytes, " is invalid: expected >= 64");
}

DataParallel::~DataParallel() = default;

void DataParallel::attach(nn::Parameters& params) {
  params_ = &params;
  plan(params.count());
  params.on_grads_final([this, &params](size_t offset) { grads_final(params, offset); });
  if (options_.zero1) shard_moments();
}

// Leaving keeps only this rank's moments (no communication here: a rank may leave while unwinding an error);
// gather_moments() first keeps them all.
void DataParallel::detach(nn::Parameters& params) {
  params.on_grads_final({});
  if (params.moments_sharded()) params.shard_moments(0, params.count());
  params_ = nullptr;
}

void DataParallel::shard_moments() {
  if (!options_.zero1 || !params_) return;
  const int r = comm_.rank();
  params_->shard_moments(bounds_[static_cast<size_t>(r)], bounds_[static_cast<size_t>(r) + 1]);
}

void DataParallel::gather_moments() {
  if (!options_.zero1 || !params_ || !params_->moments_sharded()) return;
  params_->shard_moments(0, params_->count());
  comm_.all_gather(params_->moments1(), bounds_);
  comm_.all_gather(params_->moments2(), bounds_);
}

void DataParallel::plan(size_t total) {
  buckets_.clear();
  requests_.clear();
  const size_t per = std::max<size_t>(16, options_.bucket_bytes / sizeof(float) / 16 * 16);
  for (size_t end = total; end > 0;) {
    const size_t begin = end > per ? end - per : 0;
    buckets_.push_back({begin, end});
    end = begin;
  }
  planned_for_ = total;
  last_offset_ = SIZE_MAX;
  // ZeRO-1's pieces: equal, in whole 64-byte blocks, the last rank's the rest.
  const auto n = static_cast<size_t>(comm_.size());
  const size_t piece = (total + n * 16 - 1) / (n * 16) * 16;
  bounds_.assign(n + 1, total);
  for (size_t r = 0; r < n; ++r) bounds_[r] = std::min(total, r * piece);
}

void DataParallel::launch(nn::Parameters& params, size_t k) {
  const Bucket& b = buckets_[k];
  requests_.push_back(comm_.start_sum(params.grads().subspan(b.begin, b.end - b.begin)));
  stats_.bytes += static_cast<double>((b.end - b.begin) * sizeof(float));
  ++stats_.buckets;
}

void DataParallel::grads_final(nn::Parameters& params, size_t offset) {
  if (!options_.overlap) return;
  check(offset <= last_offset_ || requests_.empty(),
        "data-parallel training sums the gradients during the backward: one accumulate() per apply_gradients() "
        "(for gradient accumulation, turn overlap off)");
  last_offset_ = offset;
  const auto t0 = Clock::now();
  // Every bucket that lies wholly at or after `offset`, in order.
  while (requests_.size() < buckets_.size() && buckets_[requests_.size()].begin >= offset)
    launch(params, requests_.size());
  // Drive the reductions already started (MPI progresses nonblocking collectives inside its calls).
  for (int r : requests_) comm_.test(r);
  stats_.issue_s += since(t0);
}

bool DataParallel::reduce(nn::Parameters& params, bool finite_loss) {
  if (planned_for_ != params.count()) plan(params.count());
  auto t0 = Clock::now();
  while (requests_.size() < buckets_.size()) launch(params, requests_.size());
  for (int r : requests_) comm_.wait(r);
  comm_.reset();
  requests_.clear();
  last_offset_ = SIZE_MAX;
  stats_.wait_s += since(t0);
  t0 = Clock::now();
  // A rank whose loss was not finite ran no backward (NonFinite::Skip) or threw (Error): every rank skips alike.
  double bad = finite_loss ? 0.0 : 1.0;
  comm_.sum({&bad, 1});
  stats_.agree_s += since(t0);
  ++stats_.steps;
  return bad == 0.0;
}

void DataParallel::after_step(nn::Parameters& params) {
  if (options_.zero1) {
    // Each rank updated its piece of the values: every piece to every rank.
    const auto t0 = Clock::now();
    comm_.all_gather(params.values(), bounds_);
    stats_.gather_s += since(t0);
  }
  if (!options_.check_replicas) return;
  std::vector<float> host(params.count());
  params.ops().download(host.data(), params.values().data(), host.size() * sizeof(float));
  const auto h = static_cast<int64_t>(hash_of(host));
  int64_t v[2] = {h, ~h};  // max(~h) == ~min(h): every rank's hash is equal iff max(h) == min(h)
  comm_.max(v);
  check(v[0] == ~v[1], "the parameters differ between ranks after step ", stats_.steps,
        " (a replica diverged: the ranks must run the same build, config and data)");
}

}  // namespace qkv::dist
