#pragma once
// A group of processes (ranks) that reduce together: what data-parallel training needs of MPI (parallel/mpi.cpp,
// CPU tensors) or NCCL (parallel/nccl.cpp, GPU tensors). Collectives are matched by the order they are started in,
// so every rank must start the same ones in the same order.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "qkv/tensor.h"

namespace qkv::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi (2 ranks)", for logs.
  virtual std::string name() const = 0;

  // ---- Gradients: device memory of the model (host memory for MPI on the CPU) ----

  // Starts summing x across ranks, in place; the result is the same bits on every rank. Returns a handle for
  // test() and wait(), valid until reset().
  virtual int start_sum(Span x) = 0;
  // Advances the reduction and says whether it is done (drives progress while the backward runs).
  virtual bool test(int request) = 0;
  virtual void wait(int request) = 0;
  // Forgets every finished handle (between steps).
  virtual void reset() = 0;
  // Every rank's piece of x to every rank, in place: rank r's is [bounds[r], bounds[r + 1]) (size() + 1 bounds).
  virtual void all_gather(Span x, std::span<const size_t> bounds) = 0;

  // ---- Small values, host memory, blocking ----

  virtual void sum(std::span<double> x) = 0;
  virtual void max(std::span<int64_t> x) = 0;
  // root's string into every rank's s.
  virtual void broadcast(std::string& s, int root) = 0;
};

}  // namespace qkv::dist
