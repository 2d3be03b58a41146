// The thread pool behind parallel_for.
//
// A generation counter wakes the workers for each parallel region; each worker runs the chunk whose index
// is its own, the caller runs chunk 0, and the caller waits until every chunk is done. Regions are
// serialised by a mutex, and a region started from inside a chunk runs inline (thread_local flag), so
// nested kernels are safe. In the single-threaded build (QKV_THREADS=0) everything runs inline.
//
// A training step is a few hundred short regions (one matrix product is tens of microseconds), and waking
// a thread blocked on a condition variable costs about as much. So a worker that has finished its chunk,
// and a caller waiting for the workers, first spin on the atomic counters for a short while (kSpin) and
// only then block, as OpenMP runtimes do; the spin yields the core now and then, so that it does not starve
// the threads it waits for when the machine has more runnable threads than cores.
#include "qkv/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "qkv/error.h"

#if QKV_THREADS
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#endif
#ifdef __EMSCRIPTEN__
#include <emscripten.h>
#endif

namespace qkv {

#if QKV_THREADS
namespace {

thread_local bool t_inside_region = false;

// How long a thread spins before it blocks: a few regions' worth, short enough not to matter when idle.
constexpr auto kSpin = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or kSpin has passed; returns done().
template <class Done>
bool spin_until(Done done) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63) {
      if (std::chrono::steady_clock::now() - start > kSpin) return done();
      // Every few microseconds, let the OS run another thread on this core: on a busy machine (more runnable
      // threads than cores) the thread we wait for may be the one waiting for our core. Measured on the
      // 2-core machine with a build running beside it: the char GPT step at 2 threads, median of 8 runs,
      // 81 ms with the yield against 132 ms without.
      std::this_thread::yield();
    }
  }
}

int default_threads() {
#ifdef __EMSCRIPTEN__
  return 1;  // the JS loader calls set_num_threads once the pthread pool is up
#else
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#endif
}

class ThreadPool {
 public:
  ThreadPool() { resize(default_threads()); }
  ~ThreadPool() { resize(1); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int threads) {
    std::lock_guard region(region_mutex_);
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      ++generation_;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
    stop_ = false;
    // A new worker must only react to regions started after it exists.
    const uint64_t now = generation_;
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i, now] { work(i, now); });
  }

  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard region(region_mutex_);
    const int chunks = static_cast<int>(std::min<int64_t>(n, size()));
    {
      std::lock_guard lock(mutex_);
      fn_ = &fn;
      n_ = n;
      chunks_ = chunks;
      pending_.store(chunks - 1, std::memory_order_relaxed);  // the workers that take part; the caller does chunk 0
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    run_chunk(0);
    if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock lock(mutex_);
      done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    fn_ = nullptr;
  }

 private:
  void run_chunk(int chunk) {
    const int64_t begin = n_ * chunk / chunks_, end = n_ * (chunk + 1) / chunks_;
    t_inside_region = true;
    (*fn_)(begin, end);
    t_inside_region = false;
  }

  void work(int index, uint64_t seen) {
    for (;;) {
      auto started = [&] { return generation_.load(std::memory_order_acquire) != seen; };
      const bool spun = spin_until(started);
      int chunks = 0;
      {
        // Under the lock, so that the generation and its region's fields are read as one snapshot.
        std::unique_lock lock(mutex_);
        if (!spun) wake_.wait(lock, started);
        seen = generation_.load(std::memory_order_relaxed);
        if (stop_) return;
        chunks = chunks_;
      }
      if (index >= chunks) continue;
      run_chunk(index);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lock(mutex_);  // the caller may be between its check and its wait
        done_.notify_one();
      }
    }
  }

  std::mutex region_mutex_;  // one parallel region at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int chunks_ = 0;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
};

ThreadPool& pool() {
  static ThreadPool instance;
  return instance;
}

}  // namespace

int max_threads() {
#ifdef __EMSCRIPTEN__
  // The JS loader sizes the pthread pool with Module.qkvThreads (see wasm-bindings/CMakeLists.txt).
  return EM_ASM_INT({ return (Module["qkvThreads"] || 4); }) + 1;
#else
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) * 4;
#endif
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || t_inside_region || pool().size() == 1) {
    fn(0, n);
    return;
  }
  pool().run(n, fn);
}

void set_num_threads(int n) {
  check(n >= 1 && n <= max_threads(), "threads = ", n, " is out of range: expected 1 to ", max_threads());
  if (n != pool().size()) pool().resize(n);
}

int num_threads() { return pool().size(); }
bool threaded_build() { return true; }

#else  // single-threaded build

int max_threads() { return 1; }
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n > 0) fn(0, n);
}
void set_num_threads(int n) {
  check(n == 1, "threads = ", n, " is out of range: this is the single-threaded build, expected 1");
}
int num_threads() { return 1; }
bool threaded_build() { return false; }

#endif

}  // namespace qkv
