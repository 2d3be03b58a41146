#include "distributed.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "qkv/error.h"

namespace qkv::cli {

Distributed::Distributed(std::unique_ptr<dist::Communicator> comm, const dist::DataParallelOptions& options)
    : comm_(std::move(comm)), sync_(*comm_, options) {}

Distributed::~Distributed() {
  if (task_) task_->set_gradient_sync(nullptr);
}

std::string Distributed::describe(int batch) const {
  const int per = batch / size(), extra = batch % size();
  return detail::cat(comm_->name(), ", global batch ", batch, " = ", per, extra ? "-" : "",
                     extra ? std::to_string(per + 1) : std::string(), " rows per rank");
}

void Distributed::check_same(const std::vector<std::pair<std::string, std::string>>& fields) {
  // Rank 0's values to every rank; the lowest rank that differs says where, to every rank.
  std::string lead_values = nlohmann::json(fields).dump();
  comm_->broadcast(lead_values, 0);
  const auto theirs = nlohmann::json::parse(lead_values).get<std::vector<std::pair<std::string, std::string>>>();
  std::string mismatch;
  for (size_t i = 0; i < fields.size() && mismatch.empty(); ++i) {
    const std::string lead_value = i < theirs.size() ? theirs[i].second : "(none)";
    if (i >= theirs.size() || theirs[i] != fields[i])
      mismatch = detail::cat("the ranks were started differently: ", fields[i].first, " is ", fields[i].second,
                             " on rank ", rank(), " but ", lead_value, " on rank 0; every rank must run the same ",
                             "command on the same data");
  }
  int64_t first[1] = {mismatch.empty() ? -1 : static_cast<int64_t>(size() - rank())};
  comm_->max(first);  // the lowest differing rank has the largest size - rank
  if (first[0] < 0) return;
  const int from = size() - static_cast<int>(first[0]);
  comm_->broadcast(mismatch, from);
  throw CollectiveError(mismatch);
}

void Distributed::attach(Task& task) {
  task_ = &task;
  task.set_gradient_sync(&sync_);
}

namespace {

// For the fault tests (tests/mpi): QKV_TEST_FAULT="RANK:STEP" makes rank RANK fail with a qkv::Error when it
// starts its STEP-th step of this run; "RANK:STEP:kill" makes it die there (SIGKILL), as a crashed host would.
void injected_fault(int rank, long long steps) {
  static const char* spec = std::getenv("QKV_TEST_FAULT");
  if (!spec) return;
  int r = -1;
  long long s = -1;
  char how[8] = "";
  if (std::sscanf(spec, "%d:%lld:%7s", &r, &s, how) < 2 || r != rank || s != steps) return;
  if (std::string(how) == "kill") std::raise(SIGKILL);
  throw Error(detail::cat("QKV_TEST_FAULT: rank ", rank, " fails at its step ", steps, " (a test)"));
}

}  // namespace

Distributed::Result Distributed::train_step(Task& task, const Batch& b, bool stop) {
  injected_fault(rank(), ++steps_);
  // Rows as even as they come: the first batch % size ranks take one more.
  const int per = b.rows / size(), extra = b.rows % size();
  const int first = rank() * per + std::min(rank(), extra), rows = per + (rank() < extra ? 1 : 0);
  const Batch part = rows_of(b, first, rows);
  const long long total = task.counted(b), mine = task.counted(part);
  const float weight = total > 0 ? static_cast<float>(static_cast<double>(mine) / static_cast<double>(total)) : 0.f;
  const float loss = task.train_part(part, weight);
  // The whole batch's mean: each part's mean weighted by its share (a part with no counted target adds 0).
  double v[2] = {mine > 0 ? static_cast<double>(loss) * mine / static_cast<double>(total) : 0.0, stop ? 1.0 : 0.0};
  comm_->sum(v);
  return {static_cast<float>(v[0]), v[1] > 0.0};
}

}  // namespace qkv::cli
