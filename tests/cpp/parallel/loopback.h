#pragma once
// A group of one rank for the data-parallel tests without MPI: a sum is the identity. Records the sums started
// (pointer, floats) so that a test can see when and in which order the buckets went.
#include <string>
#include <utility>
#include <vector>

#include "parallel/communicator.h"

namespace qkv::test {

class Loopback final : public dist::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "loopback"; }
  int start_sum(Span x) override {
    started.push_back({x.data(), x.size()});
    return static_cast<int>(started.size() - 1);
  }
  bool test(int) override { return true; }
  void wait(int) override {}
  void reset() override {}
  void all_gather(Span, std::span<const size_t>) override {}
  void sum(std::span<double>) override {}
  void max(std::span<int64_t>) override {}
  void broadcast(std::string&, int) override {}

  std::vector<std::pair<const float*, size_t>> started;
};

}  // namespace qkv::test
