#pragma once
// A stand-in for the npm package's GPU worker (web/src/gpu-worker.ts), for native tests of the WebGPU
// executor's side of the protocol: a thread that reads the command ring and runs each command on the CPU
// executor over a host arena. What it checks: every op's words (a wrong offset, size or flag gives wrong
// numbers), the ring's wrap and back-pressure, tickets, chunked uploads, the arena's growth and the failure
// paths. What it cannot check: the WGSL kernels (tests/e2e/webgpu*.test.ts run those in Chromium).
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "exec/webgpu/webgpu_backend.h"
#include "exec/webgpu/webgpu_protocol.h"
#include "ops/ops.h"

namespace qkv::test {

class WebGpuLoopback {
 public:
  // Connects Device::WebGPU to a new loopback with these limits and ring size.
  explicit WebGpuLoopback(size_t ring_words = 1 << 16, uint64_t max_buffer = uint64_t{1} << 30) {
    connect(ring_words, max_buffer);
  }
  // Nothing serves the connection any more: it is failed, so that no model waits on it (and the next
  // webgpu_loopback() connects a fresh one).
  ~WebGpuLoopback() {
    stop();
    if (block_) report(ops::webgpu::kFailed, "the loopback ended");
  }
  WebGpuLoopback(const WebGpuLoopback&) = delete;
  WebGpuLoopback& operator=(const WebGpuLoopback&) = delete;

  void connect(size_t ring_words, uint64_t max_buffer) {
    stop();
    if (block_) report(ops::webgpu::kFailed, "the loopback was reconnected");
    ops::WebGpuLimits limits;
    limits.max_buffer_size = limits.max_storage_buffer_binding_size = max_buffer;
    limits.adapter = "loopback";
    block_ = ops::webgpu_open(limits, ring_words);
    arena_.clear();
    stop_ = false;
    thread_ = std::thread([this] { run(); });
  }

  // The next kernel command fails with `message` (Status 1), or as a device loss (Status 2).
  void fail_next(const std::string& message, bool lost = false) {
    std::lock_guard lock(mutex_);
    fail_message_ = message;
    fail_ = lost ? 2 : 1;
  }
  size_t wraps() const { return wraps_.load(); }
  size_t uploads() const { return uploads_.load(); }
  size_t capacity() const { return capacity_.load(); }

 private:
  using Op = ops::webgpu::Op;
  std::atomic<int32_t>& word(int i) { return reinterpret_cast<std::atomic<int32_t>*>(block_)[i]; }

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  void run() {
    namespace ctl = ops::webgpu::control;
    const uint32_t R = static_cast<uint32_t>(word(ctl::kRingWords).load());
    const uint32_t* ring = reinterpret_cast<const uint32_t*>(block_ + ctl::kWords);
    while (!stop_) {
      uint32_t tail = static_cast<uint32_t>(word(ctl::kTail).load());
      const uint32_t head = static_cast<uint32_t>(word(ctl::kHead).load());
      if (tail == head) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        continue;
      }
      while (tail != head) {
        const uint32_t h = ring[tail], op = h >> 16, n = h & 0xffff;
        if (op == static_cast<uint32_t>(Op::Wrap)) {
          tail = 0;
          ++wraps_;
          continue;
        }
        if (word(ctl::kStatus).load() == ops::webgpu::kOk) {
          try {
            check_injected(op);
            execute(static_cast<Op>(op), ring + tail + 1);
          } catch (const std::exception& e) {
            report(ops::webgpu::kFailed, e.what());
          }
        }
        // A command that carries a ticket is answered even after a failure: the core is waiting on it.
        if (op == static_cast<uint32_t>(Op::Download) || op == static_cast<uint32_t>(Op::Sync)) {
          word(ctl::kReply).store(static_cast<int32_t>(ring[tail + n - 1]));
        }
        tail = (tail + n) % R;
        word(ctl::kTail).store(static_cast<int32_t>(tail));
      }
    }
  }

  void check_injected(uint32_t op) {
    std::lock_guard lock(mutex_);
    if (!fail_ || op < 16) return;
    const int kind = fail_;
    fail_ = 0;
    report(kind == 2 ? ops::webgpu::kLost : ops::webgpu::kFailed, fail_message_);
    throw Skip{};
  }
  struct Skip : std::exception {};

  void report(int32_t status, const std::string& message) {
    namespace ctl = ops::webgpu::control;
    if (word(ctl::kStatus).load() != ops::webgpu::kOk) return;
    const size_t n = std::min<size_t>(message.size(), ctl::kMessageCapacity);
    std::memcpy(block_ + ctl::kMessage, message.data(), n);
    word(ctl::kMessageBytes).store(static_cast<int32_t>(n));
    word(ctl::kStatus).store(status);
  }

  float* f(uint32_t off) { return reinterpret_cast<float*>(arena_.data() + off); }
  int32_t* i(uint32_t off) { return reinterpret_cast<int32_t*>(arena_.data() + off); }
  uint8_t* u8(uint32_t off) { return arena_.data() + off; }
  Span s(uint32_t off, size_t n) { return Span(f(off), n); }
  static float fl(uint32_t w) {
    float x;
    std::memcpy(&x, &w, 4);
    return x;
  }
  static uint64_t u64(const uint32_t* a) { return a[0] | static_cast<uint64_t>(a[1]) << 32; }
  ops::AttentionShape shape(const uint32_t* a) {
    ops::AttentionShape sh{static_cast<int>(a[0]),
                           static_cast<int>(a[1]),
                           static_cast<int>(a[2]),
                           static_cast<int>(a[3]),
                           static_cast<int>(a[4]),
                           static_cast<int>(a[5]),
                           static_cast<int>(a[6]),
                           a[8] ? u8(a[7]) : nullptr,
                           a[9] != 0,
                           fl(a[10]),
                           u64(a + 11)};
    sh.q_pos = static_cast<int>(a[13]);
    sh.k_rows = static_cast<int>(a[14]);
    return sh;
  }
  ops::Ids ids(uint32_t off, size_t n) { return {std::span<const int32_t>(i(off), n), i(off)}; }

  // The words of one command read in order, each kind as op_list.def's table writes it.
  struct Reader {
    WebGpuLoopback& lb;
    const uint32_t* a;
    size_t at = 0;
    uint32_t next() { return a[at++]; }
    Span span() {
      const uint32_t o = next();
      return lb.s(o, next());
    }
    std::span<int32_t> ints() {
      const uint32_t o = next();
      return {lb.i(o), next()};
    }
    // The CPU executor sizes its scratch its own way (per thread): it gets a buffer of the loopback's, not the
    // WebGPU-sized one of the command (whose words are read past).
    Span scratch() {
      at += 2;
      if (lb.cpu_scratch_.empty()) lb.cpu_scratch_.resize(size_t{1} << 22);
      return lb.cpu_scratch_;
    }
    float* ptr() { return lb.f(next()); }
    const uint8_t* bytes() { return lb.u8(next()); }
    ops::Ids ids() {
      const uint32_t o = next();
      return lb.ids(o, next());
    }
    int count() { return static_cast<int>(next()); }
    float f32() { return fl(next()); }
    bool flag() { return next() != 0; }
    ops::Act act() { return static_cast<ops::Act>(next()); }
    uint64_t seed() {
      at += 2;
      return u64(a + at - 2);
    }
    ops::AttentionShape shape() {
      at += 15;
      return lb.shape(a + at - 15);
    }
    // Adam's ranges and factors do not come back as its arguments: AdamStep is run apart (execute()).
    std::span<const ops::AdamRange> ranges() { throw std::runtime_error("loopback: adam_step is run apart"); }
    ops::AdamHyper hyper() { throw std::runtime_error("loopback: adam_step is run apart"); }
  };
#define QKV_READ_(kind, name) QKV_READ_##kind
#define QKV_READ_span , r.span()
#define QKV_READ_cspan , CSpan(r.span())
#define QKV_READ_scratch , r.scratch()
#define QKV_READ_ints , r.ints()
#define QKV_READ_ptr , r.ptr()
#define QKV_READ_cptr , static_cast<const float*>(r.ptr())
#define QKV_READ_bytes , r.bytes()
#define QKV_READ_ids , r.ids()
#define QKV_READ_count , r.count()
#define QKV_READ_int , r.count()
#define QKV_READ_f32 , r.f32()
#define QKV_READ_stepf , r.f32()
#define QKV_READ_flag , r.flag()
#define QKV_READ_act , r.act()
#define QKV_READ_seed , r.seed()
#define QKV_READ_shape , r.shape()
#define QKV_READ_ranges , r.ranges()
#define QKV_READ_hyper , r.hyper()
#define QKV_READ_wu32
#define QKV_READ_wf32

  // The CPU executor runs each command, on spans over the arena sized from the command's own words.
  void execute(Op op, const uint32_t* a) {
    ops::Backend& cpu = ops::backend(Device::CPU);
    if (op == Op::AdamStep) {
      // kernels.ts's formula, as the WGSL kernel runs it, over the ranges' quads (words as op_list.def declares).
      Reader r{*this, a};
      float *p = r.span().data(), *m = r.span().data(), *v = r.span().data(), *g = r.span().data();
      const uint32_t nranges = r.next();
      r.next();  // the last range's end
      const float b1 = r.f32(), b2 = r.f32(), eps = r.f32(), gs = r.f32(), step = r.f32(), sbc2 = r.f32();
      const uint32_t* q = reinterpret_cast<const uint32_t*>(r.span().data());
      for (uint32_t r = 0; r < nranges; ++r) {
        const float l2 = fl(q[4 * r + 2]), shrink = fl(q[4 * r + 3]);
        for (uint32_t k = q[4 * r]; k < q[4 * r + 1]; ++k) {
          const float gi = g[k] * gs + l2 * p[k];
          p[k] *= shrink;
          m[k] = b1 * m[k] + (1.f - b1) * gi;
          v[k] = b2 * v[k] + (1.f - b2) * gi * gi;
          p[k] -= step * (m[k] / (std::sqrt(v[k]) / sbc2 + eps));
        }
      }
      return;
    }
    switch (op) {
      case Op::Wrap: break;
      case Op::Capacity:
        if (a[0] > arena_.size()) arena_.resize(a[0]);  // growth keeps the contents, as the worker's copy does
        capacity_ = arena_.size();
        break;
      case Op::Upload:
        std::memcpy(u8(a[0]), a + 2, a[1]);
        ++uploads_;
        break;
      case Op::Download: std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(u64(a))), u8(a[2]), a[3]); break;
      case Op::Sync: break;
      case Op::Copy:
        std::memcpy(u8(a[0]), u8(a[1]), a[2]);
        break;
        // Every kernel op but Adam's and the sum of squares: its words read back into its C++ arguments by kind,
        // in declaration order (ops/op_list.def), and the CPU executor's op called with them.
#define QKV_OP(name, Code, opcode, group, scratch)                 \
  case Op::Code: {                                                 \
    Reader r{*this, a};                                            \
    std::tuple args{QKV_DROP_FIRST(_ QKV_ARGS_##name(QKV_READ_))}; \
    std::apply([&](auto&... x) { cpu.name(x...); }, args);         \
    break;                                                         \
  }
#define QKV_OP_VALUE(type, name, Code, opcode, group, scratch)
#define QKV_SCRATCH(rule)
#define QKV_CONST(name, value)
#include "ops/op_list.def"
#undef QKV_OP
#undef QKV_OP_VALUE
#undef QKV_SCRATCH
#undef QKV_CONST
      case Op::SumSquares: {
        Reader r{*this, a};
        const Span x = r.span(), partials = r.span();  // the partial sums come as the scratch
        const size_t n = x.size(), block = ops::webgpu::kSumSquaresBlock;
        for (size_t j = 0; j * block < n; ++j) {
          double sum = 0;
          for (size_t k = j * block; k < std::min(n, (j + 1) * block); ++k) sum += double(x[k]) * x[k];
          partials[j] = static_cast<float>(sum);
        }
        break;
      }
      default: throw std::runtime_error("loopback: unknown op " + std::to_string(static_cast<uint32_t>(op)));
    }
  }

  int32_t* block_ = nullptr;
  std::vector<unsigned char> arena_;
  std::vector<float> cpu_scratch_;  // 16 MiB: more than any op of the tests asks the CPU for
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> wraps_{0}, uploads_{0}, capacity_{0};
  std::mutex mutex_;
  int fail_ = 0;
  std::string fail_message_;
};

// The process's loopback (for the op tests): connected on first use, and again after a test failed it.
inline WebGpuLoopback& webgpu_loopback() {
  // The loopback's thread runs the commands on the CPU backend, itself a function-local static: made first, it is
  // destroyed after the loopback (statics go in reverse order), whose destructor joins the thread. Made second, it
  // went first at exit while the thread still ran a command a test had left queued (ASan: heap-use-after-free).
  ops::backend(Device::CPU);
  static WebGpuLoopback lb;
  if (!ops::webgpu_unavailable_reason().empty()) lb.connect(1 << 16, uint64_t{1} << 30);
  return lb;
}

}  // namespace qkv::test
