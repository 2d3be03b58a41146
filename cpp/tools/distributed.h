#pragma once
// `mpirun -np N qkv train ...`: data-parallel training with the same arguments on every rank. Each rank builds
// the same global batch of every step (a function of seed and step), trains on its own rows of it, and the
// model's gradient sync (parallel/data_parallel.h) sums the gradients, each rank's weighted by its share of the
// batch's counted targets, so that N ranks follow one process with the same --batch to float rounding.
// Rank 0 logs, evaluates and writes the checkpoints; every rank loads one at --resume (on any number of ranks).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "qkv/error.h"
#include "task.h"

namespace qkv::cli {

// An error every rank raises together (a refused start): reported once, by rank 0, with no abort.
struct CollectiveError : Error {
  using Error::Error;
};

class Distributed {
 public:
  // The world of an active MPI session (parallel/mpi.h).
  Distributed(std::unique_ptr<dist::Communicator> comm, const dist::DataParallelOptions& options);
  ~Distributed();

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  bool lead() const { return rank() == 0; }
  std::string describe(int batch) const;

  // Refuses the start (CollectiveError naming the first differing field and the rank) unless every rank has
  // the same values; `fields` are (name, value) pairs in the same order on every rank.
  void check_same(const std::vector<std::pair<std::string, std::string>>& fields);

  // Joins the task's model to the group (and leaves it on destruction).
  void attach(Task& task);

  // One step on this rank's rows of the global batch `b`; returns the loss of the whole batch (its mean over
  // every counted target) and whether any rank asked to stop (stop: this rank's Ctrl-C).
  struct Result {
    float loss;
    bool stop;
  };
  Result train_step(Task& task, const Batch& b, bool stop);

  const dist::CommStats& stats() const { return sync_.stats(); }
  // ZeRO-1: around a checkpoint's save, on every rank (collective); nothing without it.
  void gather_moments() { sync_.gather_moments(); }
  void shard_moments() { sync_.shard_moments(); }

 private:
  std::unique_ptr<dist::Communicator> comm_;
  dist::DataParallel sync_;
  Task* task_ = nullptr;
  long long steps_ = 0;
};

}  // namespace qkv::cli
