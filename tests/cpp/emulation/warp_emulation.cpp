// The scheduler behind warp_emulation.h: a launch runs block after block; a block's threads are fibers
// (makecontext/swapcontext) that the scheduler resumes in turn, each until it waits at a barrier or ends.
// Barriers count generations: a thread that arrives last opens the barrier (the generation moves on) and carries on;
// the others become runnable again. A thread that ends leaves its warp and block (later barriers count the living
// ones), as on GPUs since Volta.
#define QKV_WARP_EMULATION 1
#include "emulation/warp_emulation.h"

#include <setjmp.h>
#include <ucontext.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

namespace qkv::emu {
namespace {

constexpr int kWarp = 32;
constexpr size_t kStackBytes = 256 * 1024;  // a kernel's frame: its register arrays, a few KiB at most

enum class Wait { None, Block, Warp };

struct Fiber {
  ucontext_t context;  // its first entry (makecontext's stack and function)
  jmp_buf jump;        // where it resumes after a barrier
  bool started = false;
  Dim3 index;
  int round = 0;
  bool done = false;
  Wait wait = Wait::None;
  uint64_t wait_generation = 0;
};

struct WarpState {
  int arrived = 0, alive = 0;
  uint64_t generation = 0;
  uint64_t slots[2][kWarp];
  uint32_t mma[2][kWarp][6];  // a0..a3, b0, b1 of each lane (the registers as given)
};

struct Launch {
  Dim3 grid, block_index, block_dim;
  const std::function<void()>* kernel = nullptr;
  std::vector<Fiber> fibers;
  std::vector<WarpState> warps;
  char* stacks = nullptr;      // threads * kStackBytes, from fiber_stacks
  std::vector<float4> shared;  // 16-byte aligned
  ucontext_t scheduler;        // the first entry's swapcontext saves here (the fiber never returns through it)
  jmp_buf scheduler_jump;      // where every barrier and every fiber's end jumps back to
  int current = -1, arrived = 0, alive = 0;
  uint64_t generation = 0;
};

thread_local Launch* active = nullptr;

// The fibers' stacks, kept from launch to launch and never cleared: a 1024-thread block needs 256 MiB of address
// space, of which a kernel touches a few KiB per fiber. Zero-filling them at every launch (a std::vector's
// resize) cost more than the kernels themselves: the emulated tests spent most of their time in that memset and
// its page faults.
char* fiber_stacks(size_t bytes) {
  thread_local std::unique_ptr<char[]> stacks;
  thread_local size_t size = 0;
  if (size < bytes) {
    stacks.reset();
    stacks.reset(new char[bytes]);  // default-initialised: the pages are only mapped when a fiber touches them
    size = bytes;
  }
  return stacks.get();
}

Launch& launch_state() {
  if (!active) throw std::logic_error("warp emulation: a CUDA built-in was used outside emu::launch");
  return *active;
}
Fiber& self() { return launch_state().fibers[static_cast<size_t>(launch_state().current)]; }
WarpState& warp_of(const Fiber& f) { return launch_state().warps[f.index.x / kWarp]; }

// Back to the scheduler until the barrier's generation moves past `generation`. The switches between a fiber and the
// scheduler are _setjmp/_longjmp (callee-saved registers and the stack pointer, no system call): swapcontext saves and
// restores the signal mask with a system call at every switch, two per barrier per thread, which was most of the
// emulated tests' time (a 512-block reduction of 256 threads is a million switches). Only a fiber's first entry, onto
// its own stack, goes through swapcontext.
void wait_for(Wait kind, uint64_t generation) {
  Fiber& f = self();
  f.wait = kind;
  f.wait_generation = generation;
  if (_setjmp(f.jump) == 0) _longjmp(launch_state().scheduler_jump, 1);
}

bool runnable(const Launch& l, const Fiber& f) {
  if (f.done) return false;
  switch (f.wait) {
    case Wait::None: return true;
    case Wait::Block: return l.generation != f.wait_generation;
    default: return l.warps[f.index.x / kWarp].generation != f.wait_generation;
  }
}

void fiber_main(int i) {
  Launch& l = launch_state();
  (*l.kernel)();
  Fiber& f = l.fibers[static_cast<size_t>(i)];
  WarpState& w = warp_of(f);
  f.done = true;
  --l.alive;
  --w.alive;
  // Those already waiting no longer wait for this thread.
  if (l.arrived > 0 && l.arrived == l.alive) l.arrived = 0, ++l.generation;
  if (w.arrived > 0 && w.arrived == w.alive) w.arrived = 0, ++w.generation;
  _longjmp(l.scheduler_jump, 1);  // never returns: the fiber's stack is abandoned
}

std::string describe(const Launch& l) {
  std::string s = "warp emulation: deadlock in block (" + std::to_string(l.block_index.x) + ", " +
                  std::to_string(l.block_index.y) + ", " + std::to_string(l.block_index.z) + "):";
  int block = 0, warp = 0;
  for (const Fiber& f : l.fibers) {
    if (f.done) continue;
    (f.wait == Wait::Block ? block : warp) += 1;
  }
  return s + " " + std::to_string(block) + " threads wait at __syncthreads, " + std::to_string(warp) +
         " at a warp-wide operation, " + std::to_string(l.fibers.size() - static_cast<size_t>(l.alive)) + " have ended";
}

// Runs fiber f until its next barrier or its end (a function of its own, so that no loop variable of the caller
// lives across the _setjmp).
[[gnu::noinline]] void resume(Launch& l, Fiber& f) {
  if (_setjmp(l.scheduler_jump) == 0) {
    if (f.started) _longjmp(f.jump, 1);
    f.started = true;
    swapcontext(&l.scheduler, &f.context);  // the fiber comes back by _longjmp, never through here
  }
}

void run_block(Launch& l, size_t threads) {
  // getcontext costs a system call (it saves the signal mask): once per block, copied into every fiber. On x86-64
  // a copy's FPU-state pointer still points into `blank`, which outlives every fiber's first resume; a fiber's
  // first swapcontext re-points it at the fiber's own area.
  ucontext_t blank;
  getcontext(&blank);
  for (size_t i = 0; i < threads; ++i) {
    Fiber& f = l.fibers[i];
    f = Fiber{};
    f.index = {static_cast<unsigned>(i), 0, 0};
    f.context = blank;
    f.context.uc_stack.ss_sp = l.stacks + i * kStackBytes;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &l.scheduler;
    makecontext(&f.context, reinterpret_cast<void (*)()>(&fiber_main), 1, static_cast<int>(i));
  }
  for (size_t w = 0; w < l.warps.size(); ++w) {
    l.warps[w] = WarpState{};
    l.warps[w].alive = static_cast<int>(std::min<size_t>(kWarp, threads - w * kWarp));
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float4& v : l.shared) v = {nan, nan, nan, nan};
  l.arrived = 0;
  l.alive = static_cast<int>(threads);
  l.generation = 0;
  while (l.alive > 0) {
    bool ran = false;
    for (size_t i = 0; i < threads; ++i) {
      Fiber& f = l.fibers[i];
      if (!runnable(l, f)) continue;
      f.wait = Wait::None;
      l.current = static_cast<int>(i);
      resume(l, f);
      ran = true;
    }
    if (!ran) throw Deadlock(describe(l));
  }
}

}  // namespace

const Dim3& thread_idx() { return self().index; }
const Dim3& block_idx() { return launch_state().block_index; }
const Dim3& block_dim() { return launch_state().block_dim; }
const Dim3& grid_dim() { return launch_state().grid; }
void* dynamic_shared_bytes() { return launch_state().shared.data(); }

void sync_block() {
  Launch& l = launch_state();
  const uint64_t generation = l.generation;
  if (++l.arrived == l.alive) {
    l.arrived = 0;
    ++l.generation;
    return;
  }
  wait_for(Wait::Block, generation);
}

void sync_warp() {
  WarpState& w = warp_of(self());
  const uint64_t generation = w.generation;
  if (++w.arrived == w.alive) {
    w.arrived = 0;
    ++w.generation;
    return;
  }
  wait_for(Wait::Warp, generation);
}

uint64_t* warp_slots(int round) { return warp_of(self()).slots[round & 1]; }
int next_round() { return self().round++; }

void launch(Dim3 grid, unsigned threads, size_t shared_bytes, const std::function<void()>& kernel) {
  if (active) throw std::logic_error("warp emulation: launches do not nest");
  if (threads == 0 || threads > 1024) throw std::invalid_argument("warp emulation: 1..1024 threads a block");
  Launch l;
  l.grid = grid;
  l.block_dim = {threads, 1, 1};
  l.kernel = &kernel;
  l.fibers.resize(threads);
  l.warps.resize((threads + kWarp - 1) / kWarp);
  l.stacks = fiber_stacks(threads * kStackBytes);
  l.shared.resize((shared_bytes + sizeof(float4) - 1) / sizeof(float4));
  active = &l;
  try {
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          l.block_index = {x, y, z};
          run_block(l, threads);
        }
  } catch (...) {
    active = nullptr;
    throw;
  }
  active = nullptr;
}

}  // namespace qkv::emu

namespace qkv::kernels::cuda {

namespace {

// Publishes the calling lane's a and b registers and waits for the warp's; returns the round's table.
const uint32_t (&gather(const uint32_t (&a)[4], const uint32_t (&b)[2]))[32][6] {
  const int round = emu::next_round();
  emu::WarpState& w = emu::warp_of(emu::self());
  uint32_t* mine = w.mma[round & 1][threadIdx.x % 32];
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  for (int i = 0; i < 2; ++i) mine[4 + i] = b[i];
  emu::sync_warp();
  return w.mma[round & 1];
}

std::atomic<emu::MmaRounding> mma_rounding{emu::MmaRounding::Nearest};

float round_mma(double x) {
  float f = static_cast<float>(x);
  if (mma_rounding.load(std::memory_order_relaxed) == emu::MmaRounding::TowardZero && std::isfinite(f) &&
      std::abs(static_cast<double>(f)) > std::abs(x))
    f = std::nextafter(f, 0.f);
  return f;
}

// c (this lane's C fragment) += sum over k < K of A(r, k) B(k, n), in double, rounded once (set_mma_rounding).
template <int K, class AAt, class BAt>
void accumulate(float (&c)[4], AAt A, BAt B) {
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int r = g + (i >= 2 ? 8 : 0), n = 2 * t + (i & 1);
    double sum = 0;
    for (int k = 0; k < K; ++k) sum += static_cast<double>(A(r, k)) * B(k, n);
    c[i] = round_mma(c[i] + sum);
  }
}

}  // namespace

void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const auto& all = gather(a, b);
  // A(r, k) and B(k, n) from the lanes that hold them (the layouts in the header).
  accumulate<8>(
      c, [&](int r, int k) { return __uint_as_float(all[(r % 8) * 4 + k % 4][(r >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0)]); },
      [&](int k, int n) { return __uint_as_float(all[n * 4 + k % 4][4 + (k >= 4 ? 1 : 0)]); });
}

uint32_t pack_bf16(float lo, float hi) {
  const auto one = [](float x) -> uint32_t {
    const uint32_t u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (u >> 16) | 0x40u;  // NaN stays NaN
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;                                        // to nearest, ties to even
  };
  return one(lo) | (one(hi) << 16);
}

float bf16_half(uint32_t packed, int high) { return __uint_as_float((high ? packed >> 16 : packed & 0xffffu) << 16); }

void mma_bf16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const auto& all = gather(a, b);
  // Column k of A: register pair (k % 16 >= 8), half k % 2, lane g * 4 + (k % 8) / 2.
  accumulate<16>(
      c,
      [&](int r, int k) {
        return bf16_half(all[(r % 8) * 4 + (k % 8) / 2][(r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2);
      },
      [&](int k, int n) { return bf16_half(all[n * 4 + (k % 8) / 2][4 + (k >= 8 ? 1 : 0)], k % 2); });
}

}  // namespace qkv::kernels::cuda

namespace qkv::emu {
MmaRounding set_mma_rounding(MmaRounding r) { return kernels::cuda::mma_rounding.exchange(r); }
}  // namespace qkv::emu

float __fadd_rn(float a, float b) { return a + b; }
float __fmul_rn(float a, float b) { return a * b; }
double __dadd_rn(double a, double b) { return a + b; }
double __dmul_rn(double a, double b) { return a * b; }
