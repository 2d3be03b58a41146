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

  // The CPU executor runs each command, on spans over the arena sized from the command's own words.
  void execute(Op op, const uint32_t* a) {
    ops::Backend& cpu = ops::backend(Device::CPU);
    const auto I = [&](int k) { return static_cast<int>(a[k]); };
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
      case Op::Copy: std::memcpy(u8(a[0]), u8(a[1]), a[2]); break;
      case Op::Fill: cpu.fill(s(a[0], a[1]), fl(a[2])); break;
      case Op::CopyRows: cpu.copy_rows(f(a[0]), I(1), f(a[2]), I(3), I(4), I(5)); break;
      case Op::Gemm:
        cpu.gemm(a[0], a[1], I(2), I(3), I(4), fl(a[5]), f(a[6]), I(7), f(a[8]), I(9), fl(a[10]), f(a[11]), I(12));
        break;
      case Op::Add: cpu.add(s(a[0], a[3]), s(a[1], a[3]), s(a[2], a[3])); break;
      case Op::LayerNormForward: {
        const size_t n = size_t{a[6]} * a[7];
        cpu.layernorm_forward(s(a[0], n), s(a[1], a[6]), s(a[2], a[6]), s(a[3], n), s(a[4], a[7]), s(a[5], a[7]), I(6),
                              I(7));
        break;
      }
      case Op::ResidualLayerNormForward: {
        const size_t n = size_t{a[8]} * a[9];
        cpu.residual_layernorm_forward(s(a[0], n), s(a[1], n), s(a[2], a[8]), s(a[3], a[8]), s(a[4], n), s(a[5], n),
                                       s(a[6], a[9]), s(a[7], a[9]), I(8), I(9));
        break;
      }
      case Op::LayerNormBackward: {
        const size_t n = size_t{a[10]} * a[11];
        cpu.layernorm_backward(s(a[0], n), s(a[1], a[11]), s(a[2], a[11]), s(a[3], a[4]), s(a[5], n), s(a[6], n),
                               s(a[7], a[11]), s(a[8], a[10]), s(a[9], a[10]), I(10), I(11), s(a[12], a[13]));
        break;
      }
      case Op::BiasActForward: {
        const size_t n = size_t{a[5]} * a[6];
        cpu.bias_act_forward(s(a[0], n), s(a[1], n), s(a[2], a[3]), static_cast<ops::Act>(a[4]), I(5), I(6));
        break;
      }
      case Op::BiasActBackward: {
        cpu.bias_act_backward(s(a[0], a[1]), s(a[2], a[3]), s(a[4], size_t{a[8]} * a[9]), s(a[5], a[6]),
                              static_cast<ops::Act>(a[7]), I(8), I(9), s(a[10], a[11]));
        break;
      }
      case Op::DropoutForward: cpu.dropout_forward(s(a[0], a[2]), s(a[1], a[2]), fl(a[3]), u64(a + 4)); break;
      case Op::DropoutBackward: cpu.dropout_backward(s(a[0], a[2]), s(a[1], a[2]), fl(a[3]), u64(a + 4)); break;
      case Op::AttentionForward: {
        const ops::AttentionShape sh = shape(a + 5);
        const size_t rows = size_t(sh.B) * sh.Tq;
        std::vector<float> scratch(cpu.attention_scratch_size(sh, 64));  // the CPU's own size, as below
        cpu.attention_forward(s(a[0], rows * sh.C), s(a[1], rows * sh.H), f(a[2]), f(a[3]), f(a[4]), sh, scratch);
        break;
      }
      case Op::AttentionBackward: {
        const ops::AttentionShape sh = shape(a + 9);
        const size_t rows = size_t(sh.B) * sh.Tq;
        // The CPU executor sizes its scratch per thread: give it its own, not the WebGPU-sized one.
        std::vector<float> scratch(cpu.attention_scratch_size(sh, 64));
        cpu.attention_backward(f(a[0]), f(a[1]), f(a[2]), s(a[3], rows * sh.C), f(a[4]), f(a[5]), f(a[6]),
                               s(a[7], rows * sh.C), s(a[8], rows * sh.H), sh, scratch);
        break;
      }
      case Op::AttentionWeights: {
        const ops::AttentionShape sh = shape(a + 3);
        cpu.attention_weights(s(a[0], size_t(sh.B) * sh.H * sh.Tq * sh.Tk), f(a[1]), f(a[2]), sh);
        break;
      }
      case Op::EmbeddingForward: {
        const size_t rows = size_t{a[6]} * a[7];
        // wte's true size is not in the command; the CPU kernel reads only the rows the (validated) ids name.
        cpu.embedding_forward(s(a[0], rows * a[8]), ids(a[1], rows), CSpan(f(a[2]), SIZE_MAX / 8), s(a[3], a[4]),
                              fl(a[5]), I(6), I(7), I(8));
        break;
      }
      case Op::EmbeddingBackward: {
        const size_t rows = size_t{a[7]} * a[8];
        std::vector<float> scratch(cpu.embedding_backward_scratch_size(I(1), static_cast<int>(rows)));
        cpu.embedding_backward(s(a[0], size_t{a[1]} * a[9]), s(a[2], a[3]), s(a[4], rows * a[9]), ids(a[5], rows),
                               fl(a[6]), I(7), I(8), I(9), scratch);
        break;
      }
      case Op::MeanPoolForward:
        cpu.mean_pool_forward(s(a[0], size_t{a[3]} * a[5]), s(a[1], size_t{a[3]} * a[4] * a[5]), u8(a[2]), I(3), I(4),
                              I(5));
        break;
      case Op::MeanPoolBackward:
        cpu.mean_pool_backward(s(a[0], size_t{a[3]} * a[4] * a[5]), s(a[1], size_t{a[3]} * a[5]), u8(a[2]), I(3), I(4),
                               I(5));
        break;
      case Op::CrossEntropyForward:
        cpu.crossentropy_forward(s(a[0], a[3]), s(a[1], size_t{a[3]} * a[4]), ids(a[2], a[3]), I(3), I(4), I(5),
                                 fl(a[6]));
        break;
      case Op::CrossEntropyForwardBackward:
        cpu.crossentropy_forward_backward(s(a[0], a[5]), s(a[1], size_t{a[5]} * a[6]), s(a[2], size_t{a[5]} * a[6]),
                                          ids(a[3], a[5]), fl(a[4]), I(5), I(6), I(7), fl(a[8]));
        break;
      case Op::ArgmaxRows:
        cpu.argmax_rows(std::span<int32_t>(i(a[0]), a[2]), s(a[1], size_t{a[2]} * a[3]), I(2), I(3));
        break;
      case Op::AdamStep: {
        // protocol.ts's formula, as the WGSL kernel runs it, over the ranges' quads.
        float *p = f(a[0]), *m = f(a[1]), *v = f(a[2]), *g = f(a[3]);
        const uint32_t* q = reinterpret_cast<const uint32_t*>(u8(a[5]));
        const float b1 = fl(a[7]), b2 = fl(a[8]), eps = fl(a[9]), gs = fl(a[10]), step = fl(a[11]), sbc2 = fl(a[12]);
        for (uint32_t r = 0; r < a[6]; ++r) {
          const float l2 = fl(q[4 * r + 2]), shrink = fl(q[4 * r + 3]);
          for (uint32_t k = q[4 * r]; k < q[4 * r + 1]; ++k) {
            const float gi = g[k] * gs + l2 * p[k];
            p[k] *= shrink;
            m[k] = b1 * m[k] + (1.f - b1) * gi;
            v[k] = b2 * v[k] + (1.f - b2) * gi * gi;
            p[k] -= step * (m[k] / (std::sqrt(v[k]) / sbc2 + eps));
          }
        }
        break;
      }
      case Op::SumSquares: {
        const float* x = f(a[0]);
        const size_t n = a[1], block = ops::webgpu::kSumSquaresBlock;
        for (size_t j = 0; j * block < n; ++j) {
          double sum = 0;
          for (size_t k = j * block; k < std::min(n, (j + 1) * block); ++k) sum += double(x[k]) * x[k];
          f(a[2])[j] = static_cast<float>(sum);
        }
        break;
      }
      default: throw std::runtime_error("loopback: unknown op " + std::to_string(static_cast<uint32_t>(op)));
    }
  }

  int32_t* block_ = nullptr;
  std::vector<unsigned char> arena_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> wraps_{0}, uploads_{0}, capacity_{0};
  std::mutex mutex_;
  int fail_ = 0;
  std::string fail_message_;
};

// The process's loopback (for the op tests): connected on first use, and again after a test failed it.
inline WebGpuLoopback& webgpu_loopback() {
  static WebGpuLoopback lb;
  if (!ops::webgpu_unavailable_reason().empty()) lb.connect(1 << 16, uint64_t{1} << 30);
  return lb;
}

}  // namespace qkv::test
