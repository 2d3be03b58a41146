// The thread pool behind parallel_for.
//
// A region cuts [0, n) into a few contiguous chunks per thread (kPoolChunksPerThread; runtime/parallel_runs.h says
// why that many) and hands them out on demand: the caller and each woken worker claim the next unclaimed chunk until
// none is left, and the caller returns once every chunk is done. Claiming on demand, rather than one fixed chunk per
// thread, matters on a shared machine: when a worker is descheduled (more runnable threads than cores), the caller and
// the other workers take its chunks instead of waiting for it, so a region costs at worst what it costs on fewer
// threads. Chunk boundaries depend only on n and the thread count, never on who runs a chunk, and the kernels'
// results do not depend on either (they sum in fixed blocks).
//
// A generation counter wakes the workers for each region. Regions are serialised by a mutex, and a region
// started from inside a chunk runs inline (thread_local flag), so nested kernels are safe. In the
// single-threaded build (QKV_THREADS=0) everything runs inline. An exception thrown by a chunk is caught,
// the region's other chunks still finish, and the first exception is rethrown to the caller.
//
// A training step is a few hundred short regions (one matrix product is tens of microseconds), and waking
// a thread blocked on a condition variable costs about as much. So a worker that has finished its chunk,
// and a caller waiting for the workers, first spin on the atomic counters for a short while (kSpin) and
// only then block, as OpenMP runtimes do; the spin yields the core now and then, so that it does not starve
// the threads it waits for when the machine has more runnable threads than cores.
//
// A notify is only made when a thread is blocked on that condition variable (sleepers_, caller_waiting_, both
// changed under mutex_ before the wait, so the notifier, which publishes its change under mutex_ too, cannot miss
// one). While the workers spin, a region therefore costs no futex call: in the WebAssembly build each
// notify_all is a call out to JavaScript (Atomics.notify), and decoding GPT-2 124M one token at a time, about
// 100 regions a token, spent 17% of the calling thread's time in emscripten_futex_wake (Node 20's profiler).
#include "qkv/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <utility>

#include "qkv/error.h"
#include "runtime/parallel_runs.h"

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
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, now] { work(now); });
  }

  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard region(region_mutex_);
    const int chunks = static_cast<int>(std::min<int64_t>(n, static_cast<int64_t>(size()) * kPoolChunksPerThread));
    bool wake_sleepers = false;
    {
      std::lock_guard lock(mutex_);
      fn_ = &fn;
      n_ = n;
      chunks_ = chunks;
      error_ = nullptr;
      done_chunks_.store(0, std::memory_order_relaxed);
      const uint64_t region_id = generation_.load(std::memory_order_relaxed) + 1;
      // Published before the generation: a worker that sees the new generation sees this region's claims.
      claim_.store(region_id << 32 | static_cast<uint64_t>(chunks) << 16, std::memory_order_release);
      generation_.store(region_id, std::memory_order_release);
      wake_sleepers = sleepers_ > 0;
    }
    if (wake_sleepers) wake_.notify_all();
    run_claimed_chunks();
    auto finished = [this, chunks] { return done_chunks_.load(std::memory_order_acquire) == chunks; };
    if (!spin_until(finished)) {
      std::unique_lock lock(mutex_);
      caller_waiting_ = true;
      done_.wait(lock, finished);
      caller_waiting_ = false;
    }
    fn_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  // claim_ = region id (32 bits) | chunk count (16) | next unclaimed chunk (16). The id makes a stale claim
  // from an earlier region fail its compare-exchange. A successful claim pins the region: it cannot finish,
  // nor fn_ and n_ change, before that chunk is done.
  bool try_claim(int& chunk) {
    uint64_t v = claim_.load(std::memory_order_acquire);
    for (;;) {
      const int next = static_cast<int>(v & 0xffff), count = static_cast<int>(v >> 16 & 0xffff);
      if (next >= count) return false;
      if (claim_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        chunk = next;
        return true;
      }
    }
  }

  void run_claimed_chunks() {
    int chunk = 0;
    while (try_claim(chunk)) {
      // Read before this chunk counts as done: after that the caller may start the next region.
      const int chunks = chunks_;
      const int64_t begin = n_ * chunk / chunks, end = n_ * (chunk + 1) / chunks;
      t_inside_region = true;
      try {
        (*fn_)(begin, end);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      t_inside_region = false;
      if (done_chunks_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
        std::lock_guard lock(mutex_);  // the caller may be between its check and its wait
        if (caller_waiting_) done_.notify_one();
      }
    }
  }

  void work(uint64_t seen) {
    for (;;) {
      auto started = [&] { return generation_.load(std::memory_order_acquire) != seen; };
      const bool spun = spin_until(started);
      {
        std::unique_lock lock(mutex_);
        if (!spun) {
          ++sleepers_;
          wake_.wait(lock, started);
          --sleepers_;
        }
        seen = generation_.load(std::memory_order_relaxed);
        if (stop_) return;
      }
      run_claimed_chunks();
    }
  }

  std::mutex region_mutex_;  // one parallel region at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int chunks_ = 0;
  std::exception_ptr error_;
  std::atomic<int> done_chunks_{0};
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  int sleepers_ = 0;             // workers blocked in wake_.wait (under mutex_)
  bool caller_waiting_ = false;  // the caller blocked in done_.wait (under mutex_)
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

void parallel_for_runs(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t T = num_threads(), ranges = T * kPoolChunksPerThread;
  if (T == 1 || n < ranges || t_inside_region) return parallel_for(n, fn);
  parallel_for(ranges, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r = c % T * kPoolChunksPerThread + c / T;
      fn(n * r / ranges, n * (r + 1) / ranges);
    }
  });
}

void set_num_threads(int n) {
  check(n >= 1 && n <= max_threads(), "threads = ", n, " is out of range: expected 1 to ", max_threads());
  // Resizing joins the workers, which a region's chunk (one of them, or the caller waiting for them) would wait for:
  // refused rather than a hang.
  check(!t_inside_region, "set_num_threads(", n,
        ") was called inside a parallel_for chunk: the pool cannot change while it runs a region; call it between "
        "regions");
  if (n != pool().size()) pool().resize(n);
}

int num_threads() { return pool().size(); }
bool threaded_build() { return true; }

#else  // single-threaded build

int max_threads() { return 1; }
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n > 0) fn(0, n);
}
void parallel_for_runs(int64_t n, const std::function<void(int64_t, int64_t)>& fn) { parallel_for(n, fn); }
void set_num_threads(int n) {
  check(n == 1, "threads = ", n, " is out of range: this is the single-threaded build, expected 1");
}
int num_threads() { return 1; }
bool threaded_build() { return false; }

#endif

}  // namespace qkv
