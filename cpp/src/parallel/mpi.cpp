// parallel/mpi.h with MPI (QKV_MPI builds): nonblocking MPI_Iallreduce on host float buffers for the buckets,
// blocking collectives for the small values.
#include "parallel/mpi.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <vector>

#include "qkv/error.h"

namespace qkv::dist {
namespace {

void ok(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, text, &n);
  throw Error(detail::cat(call, " failed: ", std::string(text, static_cast<size_t>(n))));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    ok(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    // Errors come back as codes (then qkv::Error) rather than aborting inside MPI.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  // With a reduction in flight (an exception left a step midway), freeing could wait on ranks that never come:
  // the communicator is left to the process's end (MPI_Abort or exit) instead.
  ~MpiCommunicator() override {
    for (MPI_Request r : requests_)
      if (r != MPI_REQUEST_NULL) return;
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return detail::cat("mpi (", size_, size_ == 1 ? " rank)" : " ranks)"); }

  int start_sum(Span x) override {
    check(x.size() <= static_cast<size_t>(INT_MAX), "an all-reduce of ", x.size(), " floats: expected < 2^31");
    requests_.push_back(MPI_REQUEST_NULL);
    ok(MPI_Iallreduce(MPI_IN_PLACE, x.data(), static_cast<int>(x.size()), MPI_FLOAT, MPI_SUM, comm_, &requests_.back()),
       "MPI_Iallreduce");
    return static_cast<int>(requests_.size() - 1);
  }
  bool test(int r) override {
    int done = 0;
    ok(MPI_Test(&requests_[static_cast<size_t>(r)], &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }
  void wait(int r) override { ok(MPI_Wait(&requests_[static_cast<size_t>(r)], MPI_STATUS_IGNORE), "MPI_Wait"); }
  void reset() override {
    for (MPI_Request r : requests_) check(r == MPI_REQUEST_NULL, "Communicator::reset() with a reduction in flight");
    requests_.clear();
  }

  void all_gather(Span x, std::span<const size_t> bounds) override {
    check(bounds.size() == static_cast<size_t>(size_) + 1 && bounds.back() <= x.size() &&
              bounds.back() <= static_cast<size_t>(INT_MAX),
          "all_gather: expected ", size_ + 1, " bounds within ", x.size(), " floats (< 2^31)");
    std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      displs[static_cast<size_t>(r)] = static_cast<int>(bounds[static_cast<size_t>(r)]);
      counts[static_cast<size_t>(r)] =
          static_cast<int>(bounds[static_cast<size_t>(r) + 1] - bounds[static_cast<size_t>(r)]);
    }
    ok(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x.data(), counts.data(), displs.data(), MPI_FLOAT, comm_),
       "MPI_Allgatherv");
  }

  void sum(std::span<double> x) override {
    ok(MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(x.size()), MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce");
  }
  void max(std::span<int64_t> x) override {
    ok(MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(x.size()), MPI_INT64_T, MPI_MAX, comm_), "MPI_Allreduce");
  }
  void broadcast(std::string& s, int root) override {
    long long n = static_cast<long long>(s.size());
    ok(MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm_), "MPI_Bcast");
    check(n <= INT_MAX, "a broadcast of ", n, " bytes: expected < 2^31");
    s.resize(static_cast<size_t>(n));
    ok(MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, root, comm_), "MPI_Bcast");
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> requests_;
};

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

MpiSession::MpiSession() {
  if (!launched_by_mpi()) return;
  int provided = 0;
  // Only the training thread calls MPI (the thread pool's workers never do).
  ok(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  active_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiSession::~MpiSession() {
  if (active_) MPI_Finalize();
}

std::unique_ptr<Communicator> mpi_world() { return std::make_unique<MpiCommunicator>(); }

void abort_all(int status) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, status);
  std::exit(status);
}

}  // namespace qkv::dist
