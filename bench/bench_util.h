#pragma once
// What every benchmark here shares: a timer, a sink that keeps results alive, the machine's load and the
// process's peak memory.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

namespace qkv::bench {

class Timer {
 public:
  Timer() : t0_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  std::chrono::steady_clock::time_point t0_;
};

// CPU time of the calling thread: unlike wall time, it does not count the time other processes held the core.
class ThreadCpuTimer {
 public:
  ThreadCpuTimer() : t0_(now()) {}
  double seconds() const { return now() - t0_; }

 private:
  static double now() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  }
  double t0_;
};

// Stores x where the optimiser cannot see it being unused.
inline volatile float g_sink;
inline void keep(float x) { g_sink = x; }

// The fastest of `trials` runs of fn repeated until it took at least min_seconds, in seconds per call.
template <class Fn>
double best_seconds_per_call(Fn&& fn, double min_seconds, int trials) {
  double best = 1e30;
  for (int trial = 0; trial < trials; ++trial) {
    int calls = 0;
    const Timer t;
    do {
      fn();
      ++calls;
    } while (t.seconds() < min_seconds);
    best = std::min(best, t.seconds() / calls);
  }
  return best;
}

// /proc/loadavg's 1-, 5- and 15-minute load averages ("?" where it cannot be read).
inline std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "?";
  return one + " " + five + " " + fifteen;
}

// Starts the process's resident high-water mark (VmHWM) over from its current resident size (Linux: writing 5 to
// /proc/self/clear_refs), so that peak_rss_since_reset_mib() is the peak of what runs after; false where it cannot.
inline bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  return static_cast<bool>(out << "5" << std::flush);
}

// VmHWM of /proc/self/status in MiB: the peak resident memory since reset_peak_rss() (or since the start); -1 where
// it cannot be read.
inline double peak_rss_since_reset_mib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  double kib = -1;
  while (in >> key) {
    if (key == "VmHWM:") {
      in >> kib;
      break;
    }
    in.ignore(1 << 20, '\n');
  }
  return kib < 0 ? -1 : kib / 1024.0;
}

// The process's peak resident memory so far (getrusage ru_maxrss; KiB on Linux), in MiB.
inline double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

}  // namespace qkv::bench
