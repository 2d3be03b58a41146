// The WebGPU executor: every op of the contract becomes a command (webgpu_protocol.h; its words follow from the
// op's declaration in ops/op_list.def) written into a ring in shared memory, which the GPU worker encodes
// into WebGPU dispatches. Why a ring and not calls into JS: the models are synchronous C++, WebGPU reads back
// asynchronously (mapAsync), and a wasm thread cannot await. So the GPU lives in another worker, and this side
// blocks (a futex wait) only where the contract waits anyway: download(), sum_squares(), synchronize(). Every
// other op is a few words in the ring; the worker sees them in batches, at the next wait or when the ring
// fills, and submits them as one command buffer.
//
// Device memory is the GPU worker's arena, one storage buffer; a device pointer here is kBase + its byte
// offset in the arena (never dereferenced on this side). The allocator (first fit, 256-byte blocks) lives
// here so that allocate() needs no round trip; the worker only hears the arena's new high-water mark.
#include "exec/webgpu/webgpu_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "exec/webgpu/webgpu_protocol.h"
#include "ops/backends.h"
#include "ops/ops.h"
#include "ops/weight_quantize.h"
#include "qkv/error.h"

#if defined(__EMSCRIPTEN__)
#include <emscripten/threading.h>
#endif

namespace qkv::ops {
namespace {

using webgpu::Op;
namespace ctl = webgpu::control;

constexpr uintptr_t kBase = 4096;    // device pointer = kBase + arena byte offset; nullptr stays "none"
constexpr size_t kAlign = 256;       // minStorageBufferOffsetAlignment, and a cache line many times over
constexpr double kWaitLimitS = 300;  // a reply later than this: the worker is gone (SwiftShader runs slowly)

// Wakes the worker waiting on `word` / waits while `word` == expected, at most `ms`. In the browser these are
// Atomics.notify and Atomics.wait on the wasm memory; natively (the loopback tests) a short sleep suffices.
void wake(std::atomic<int32_t>* word) {
#if defined(__EMSCRIPTEN_PTHREADS__)
  emscripten_futex_wake(word, INT_MAX);
#else
  (void)word;
#endif
}
void wait_while(std::atomic<int32_t>* word, int32_t expected, double ms) {
#if defined(__EMSCRIPTEN_PTHREADS__)
  emscripten_futex_wait(word, static_cast<uint32_t>(expected), ms);
#else
  (void)ms;
  if (word->load() == expected) std::this_thread::sleep_for(std::chrono::microseconds(20));
#endif
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
uint32_t u32(int i) { return static_cast<uint32_t>(i); }

// The ring and its control block, in one allocation: int32 words, control::kWords of control, then the ring.
class Channel {
 public:
  Channel(size_t ring_words) : words_(ctl::kWords + ring_words) {
    block_ = std::make_unique<std::atomic<int32_t>[]>(words_);
    for (size_t i = 0; i < words_; ++i) block_[i].store(0);
    block_[ctl::kRingWords].store(static_cast<int32_t>(ring_words));
    ring_words_ = static_cast<uint32_t>(ring_words);
  }
  int32_t* address() { return reinterpret_cast<int32_t*>(block_.get()); }
  uint32_t ring_words() const { return ring_words_; }

  // Appends one command: op, then `args` (and `tail` words of payload after them). A full ring is first
  // handed to the worker, and this waits for room.
  void put(Op op, std::initializer_list<uint32_t> args, const void* tail = nullptr, size_t tail_words = 0) {
    check_status();
    const uint32_t n = static_cast<uint32_t>(1 + args.size() + tail_words);
    uint32_t h = head();
    if (h + n > ring_words_) {  // no room before the end: a Wrap, then start over at 0
      reserve(ring_words_ - h + n);
      ring(h) = static_cast<int32_t>(static_cast<uint32_t>(Op::Wrap) << 16 | 1u);
      h = 0;
    } else {
      reserve(n);
    }
    ring(h) = static_cast<int32_t>(static_cast<uint32_t>(op) << 16 | n);
    uint32_t i = h + 1;
    for (uint32_t a : args) ring(i++) = static_cast<int32_t>(a);
    if (tail_words) std::memcpy(reinterpret_cast<int32_t*>(&block_[ctl::kWords]) + i, tail, tail_words * 4);
    block_[ctl::kHead].store(static_cast<int32_t>((h + n) % ring_words_));
    // Let the worker start early on a long run of ops; it is woken at every wait anyway.
    if (used() > ring_words_ / 4) wake(&block_[ctl::kHead]);
  }

  // A command the caller waits for: it carries a ticket as its last argument (the worker stores it in Reply
  // once done). Returns when answered; throws what the worker reported.
  uint32_t next_ticket() { return ++ticket_; }
  void wait(uint32_t ticket) {
    wake(&block_[ctl::kHead]);
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const int32_t r = block_[ctl::kReply].load();
      if (static_cast<int32_t>(static_cast<uint32_t>(r) - ticket) >= 0) break;
      check_status();
      wait_while(&block_[ctl::kReply], r, 1000);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      check(s < kWaitLimitS, "webgpu: the GPU worker has not answered for ", static_cast<int>(s),
            " s; it has stopped (the page closed its worker, or the browser ended it)");
    }
    check_status();
  }

  void fail(const std::string& why) {
    failure_ = why;
    block_[ctl::kStatus].store(webgpu::kFailed);
  }
  std::string status_message() const {
    const int32_t st = block_[ctl::kStatus].load();
    if (st == webgpu::kOk) return "";
    if (!failure_.empty()) return failure_;
    const int32_t n = std::clamp<int32_t>(block_[ctl::kMessageBytes].load(), 0, ctl::kMessageCapacity);
    std::string m(reinterpret_cast<const char*>(&block_[ctl::kMessage]), static_cast<size_t>(n));
    return (st == webgpu::kLost ? "the GPU device was lost: " : "") + (m.empty() ? "unknown failure" : m);
  }
  void check_status() const {
    if (block_[ctl::kStatus].load() != webgpu::kOk) throw Error("webgpu: " + status_message());
  }

 private:
  std::atomic<int32_t>& ring(uint32_t i) { return block_[ctl::kWords + i]; }
  uint32_t head() const { return static_cast<uint32_t>(block_[ctl::kHead].load()); }
  uint32_t used() const {
    const uint32_t h = head(), t = static_cast<uint32_t>(block_[ctl::kTail].load());
    return (h + ring_words_ - t) % ring_words_;
  }
  // Waits until `n` words after the head are free (the ring never fills its last word: head == tail is empty).
  void reserve(uint32_t n) {
    check(n < ring_words_, "webgpu: a command of ", n, " words does not fit the ring of ", ring_words_);
    const auto start = std::chrono::steady_clock::now();
    while (ring_words_ - 1 - used() < n) {
      check_status();
      wake(&block_[ctl::kHead]);
      const int32_t t = block_[ctl::kTail].load();
      wait_while(&block_[ctl::kTail], t, 1000);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      check(s < kWaitLimitS, "webgpu: the GPU worker has not taken commands for ", static_cast<int>(s), " s");
    }
  }

  size_t words_;
  uint32_t ring_words_;
  std::unique_ptr<std::atomic<int32_t>[]> block_;
  uint32_t ticket_ = 0;
  std::string failure_;
};

// First-fit over the arena's byte range, in kAlign blocks. Freed neighbours merge.
class ArenaAllocator {
 public:
  // Returns the offset, or SIZE_MAX when `bytes` do not fit under `limit`.
  size_t take(size_t bytes, size_t limit) {
    bytes = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      const size_t off = it->first, left = it->second - bytes;
      free_.erase(it);
      if (left) free_[off + bytes] = left;
      used_[off] = bytes;
      return off;
    }
    if (bytes > limit || top_ > limit - bytes) return SIZE_MAX;
    const size_t off = top_;
    top_ += bytes;
    used_[off] = bytes;
    return off;
  }
  void give(size_t off) {
    auto it = used_.find(off);
    if (it == used_.end()) return;
    size_t size = it->second;
    used_.erase(it);
    auto next = free_.find(off + size);
    if (next != free_.end()) {
      size += next->second;
      free_.erase(next);
    }
    auto prev = free_.lower_bound(off);
    if (prev != free_.begin()) {
      --prev;
      if (prev->first + prev->second == off) {
        prev->second += size;
        return;
      }
    }
    free_[off] = size;
  }
  size_t top() const { return top_; }
  size_t in_use() const {
    size_t n = 0;
    for (const auto& [o, s] : used_) n += s;
    return n;
  }

 private:
  std::map<size_t, size_t> free_, used_;  // offset -> bytes
  size_t top_ = 0;
};

// The scratch the WGSL kernels need (web/src/webgpu/kernels.ts: scratchSizes), in floats.
size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

class WebGpuBackend final : public Backend {
 public:
  WebGpuBackend(const WebGpuLimits& limits, size_t ring_words) : limits_(limits), channel_(ring_words) {}

  int32_t* control_block() { return channel_.address(); }
  void fail(const std::string& why) { channel_.fail(why); }
  std::string failure() const { return channel_.status_message(); }
  const WebGpuLimits& limits() const { return limits_; }
  // Bytes of the models' tensors (the backend's own partial sums not counted).
  size_t in_use() {
    std::lock_guard lock(mutex_);
    return arena_.in_use() - (partials_ ? (partials_capacity_ * sizeof(float) + kAlign - 1) / kAlign * kAlign : 0);
  }

  Device device() const override { return Device::WebGPU; }
  std::string name() const override { return "webgpu (" + limits_.adapter + ")"; }

  void* allocate(size_t bytes) override {
    std::lock_guard lock(mutex_);
    const size_t limit = static_cast<size_t>(
        std::min<uint64_t>({limits_.max_buffer_size, limits_.max_storage_buffer_binding_size, SIZE_MAX / 2}));
    const size_t off = arena_.take(bytes, limit);
    check(off != SIZE_MAX, "out of memory: the WebGPU arena needs ", arena_.in_use() + bytes,
          " bytes, more than the adapter's one-buffer limit of ", limit,
          " bytes (maxStorageBufferBindingSize / maxBufferSize of ", limits_.adapter, ")");
    if (arena_.top() > capacity_) {
      capacity_ = arena_.top();
      channel_.put(Op::Capacity, {static_cast<uint32_t>(capacity_)});
    }
    const size_t words = ceil_div(bytes, 4);
    if (words) channel_.put(Op::Fill, {static_cast<uint32_t>(off), static_cast<uint32_t>(words), bits(0.f)});
    return reinterpret_cast<void*>(kBase + off);
  }
  void free(void* p) noexcept override {
    if (!p) return;
    std::lock_guard lock(mutex_);
    arena_.give(reinterpret_cast<uintptr_t>(p) - kBase);
  }

  void upload(void* dst, const void* src, size_t bytes) override {
    // In chunks of at most a quarter of the ring, each carrying its bytes (the caller may reuse src at once).
    const size_t chunk = std::min<size_t>(64 * 1024, channel_.ring_words());  // bytes: a quarter of the ring at most
    const auto* s = static_cast<const unsigned char*>(src);
    std::vector<uint32_t> words;
    for (size_t done = 0; done < bytes; done += chunk) {
      const size_t n = std::min(chunk, bytes - done);
      words.assign(ceil_div(n, 4), 0);
      std::memcpy(words.data(), s + done, n);
      channel_.put(Op::Upload, {off(static_cast<char*>(dst) + done), static_cast<uint32_t>(n)}, words.data(),
                   words.size());
    }
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    const uint32_t t = channel_.next_ticket();
    const uint64_t host = reinterpret_cast<uintptr_t>(dst);  // wasm32: hi is 0; natively the loopback's address
    channel_.put(Op::Download, {lo(host), hi(host), off(src), static_cast<uint32_t>(bytes), t});
    channel_.wait(t);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) channel_.put(Op::Copy, {off(dst), off(src), static_cast<uint32_t>(bytes)});
  }
  void synchronize(const char* op) override {
    const uint32_t t = channel_.next_ticket();
    channel_.put(Op::Sync, {t});
    try {
      channel_.wait(t);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " (in " + op + ")");
    }
  }

  // Every op of ops/op_list.def: prepare_<op> checks the arguments (and may set an absent one, or upload what the
  // kernel reads), and returns whether there is work; the command's words then follow from the declaration
  // (Words below), so that the GPU worker reads them by name (web/src/webgpu/ops.generated.ts).
#define QKV_OP(name, Code, opcode, group, scratch)                                                    \
  void name(QKV_PARAMS(QKV_ARGS_##name)) override {                                                   \
    if (prepare_##name(QKV_NAMES(QKV_ARGS_##name))) put(Op::Code QKV_LEADING_NAMES(QKV_ARGS_##name)); \
  }
#define QKV_OP_VALUE(type, name, Code, opcode, group, scratch)
#define QKV_SCRATCH(rule)
#define QKV_CONST(name, value)
#include "ops/op_list.def"
#undef QKV_OP
#undef QKV_OP_VALUE
#undef QKV_SCRATCH
#undef QKV_CONST

  bool prepare_fill(Span x, float) { return !x.empty(); }
  bool prepare_copy_rows(float*, int ld_dst, const float*, int ld_src, int rows, int cols) {
    check(rows >= 0 && cols >= 0 && ld_dst >= cols && ld_src >= cols, "copy_rows (webgpu): rows = ", rows,
          ", cols = ", cols, ", ld_dst = ", ld_dst, ", ld_src = ", ld_src, ": expected ld >= cols >= 0");
    return rows && cols;
  }
  bool prepare_gemm(bool ta, bool tb, int M, int N, int K, float, const float*, int lda, const float*, int ldb, float,
                    float*, int ldc) {
    check(M >= 0 && N >= 0 && K >= 0, "gemm (webgpu): M = ", M, ", N = ", N, ", K = ", K, ": expected sizes >= 0");
    check(lda >= std::max(1, ta ? M : K) && ldb >= std::max(1, tb ? K : N) && ldc >= std::max(1, N),
          "gemm (webgpu): lda = ", lda, ", ldb = ", ldb, ", ldc = ", ldc, " are too small for M = ", M, ", N = ", N,
          ", K = ", K);
    return M && N;
  }
  bool prepare_add(Span out, CSpan a, CSpan b) {
    check(a.size() >= out.size() && b.size() >= out.size(), "add (webgpu): inputs of ", a.size(), " and ", b.size(),
          " floats for an output of ", out.size());
    return !out.empty();
  }

  // The quantized ops read packed rows as u32 words (web/src/webgpu/kernels.ts): W and wte must be 4-byte aligned,
  // which every row of a packed matrix is (ops/weight_format.h) in an arena block (256-byte aligned).
  // int8_act: a permission the WGSL kernels do not take (they compute in fp32).
  bool prepare_gemm_quant(int M, int N, int K, const float* A, int lda, int format, const uint8_t* W,
                          const float* scales, float* C, int ldc, bool) {
    check_gemm_quant("gemm_quant (webgpu)", M, N, K, A, lda, format, W, scales, C, ldc);
    aligned_check("gemm_quant", W);
    return M && N;
  }
  bool prepare_dequantize_rows(float* out, int ld_out, int format, const uint8_t* W, const float* scales, int rows,
                               int K) {
    check_dequantize_rows("dequantize_rows (webgpu)", out, ld_out, format, W, scales, rows, K);
    aligned_check("dequantize_rows", W);
    return rows && K;
  }

  bool prepare_layernorm_forward(Span y, Span mean, Span rstd, CSpan x, CSpan w, CSpan b, int rows, int C) {
    rows_check("layernorm_forward", rows, C, {y.size(), x.size()}, {mean.size(), rstd.size()}, {w.size(), b.size()});
    return true;
  }
  bool prepare_residual_layernorm_forward(Span r, Span y, Span mean, Span rstd, CSpan x, CSpan f, CSpan w, CSpan b,
                                          int rows, int C) {
    rows_check("residual_layernorm_forward", rows, C, {r.size(), y.size(), x.size(), f.size()},
               {mean.size(), rstd.size()}, {w.size(), b.size()});
    return true;
  }
  size_t layernorm_backward_scratch_size(int rows, int C) const override {
    return 2 * static_cast<size_t>(C) * ceil_div(static_cast<size_t>(std::max(rows, 0)), kRowBlock);
  }
  bool prepare_layernorm_backward(Span dx, Span dw, Span db, CSpan dr, CSpan dy, CSpan x, CSpan w, CSpan mean,
                                  CSpan rstd, int rows, int C, Span scratch) {
    rows_check("layernorm_backward", rows, C, {dx.size(), dy.size(), x.size()}, {mean.size(), rstd.size()},
               {dw.size(), db.size(), w.size()});
    scratch_check("layernorm_backward", scratch, layernorm_backward_scratch_size(rows, C));
    check(dr.empty() || dr.size() >= static_cast<size_t>(rows) * C, "layernorm_backward (webgpu): dr of ", dr.size(),
          " floats for rows * C = ", static_cast<size_t>(rows) * C);
    return true;
  }

  bool prepare_bias_act_forward(Span& a, Span h, CSpan b, Act act, int rows, int N) {
    check(rows >= 0 && N >= 0 && h.size() >= static_cast<size_t>(rows) * N &&
              (act == Act::Identity || a.size() >= static_cast<size_t>(rows) * N) &&
              (b.empty() || b.size() >= static_cast<size_t>(N)),
          "bias_act_forward (webgpu): spans too small for rows = ", rows, ", N = ", N);
    if (a.empty()) a = h;  // Identity may leave a empty: a is h then
    return rows && N;
  }
  size_t bias_act_backward_scratch_size(int rows, int N) const override {
    return static_cast<size_t>(N) * ceil_div(static_cast<size_t>(std::max(rows, 0)), kRowBlock);
  }
  bool prepare_bias_act_backward(Span dh, Span db, CSpan da, CSpan, Act, int rows, int N, Span scratch) {
    check(rows >= 0 && N >= 0 && da.size() >= static_cast<size_t>(rows) * N &&
              (dh.empty() || dh.size() >= static_cast<size_t>(rows) * N) &&
              (db.empty() || db.size() >= static_cast<size_t>(N)),
          "bias_act_backward (webgpu): spans too small for rows = ", rows, ", N = ", N);
    if (!db.empty()) scratch_check("bias_act_backward", scratch, bias_act_backward_scratch_size(rows, N));
    return rows && N;
  }

  bool prepare_dropout_forward(Span y, CSpan x, float, uint64_t) {
    check(x.size() >= y.size(), "dropout_forward (webgpu): x of ", x.size(), " floats for y of ", y.size());
    return !y.empty();
  }
  bool prepare_dropout_backward(Span dx, CSpan dy, float, uint64_t) {
    check(dy.size() >= dx.size(), "dropout_backward (webgpu): dy of ", dy.size(), " floats for dx of ", dx.size());
    return !dx.empty();
  }

  size_t attention_scratch_size(const AttentionShape& s, int) const override {
    // The backward's D = rowsum(dout * out) per (b, h, query).
    return static_cast<size_t>(s.B) * s.H * s.Tq;
  }
  bool prepare_attention_forward(Span, Span, const float*, const float*, const float*, const AttentionShape& s, Span) {
    shape_check("attention_forward", s);
    return true;
  }
  bool prepare_attention_backward(float*, float*, float*, CSpan, const float*, const float*, const float*, CSpan, CSpan,
                                  const AttentionShape& s, Span scratch) {
    shape_check("attention_backward", s);
    scratch_check("attention_backward", scratch, attention_scratch_size(s, 1));
    return true;
  }
  bool prepare_attention_weights(Span att, const float*, const float*, const AttentionShape& s) {
    shape_check("attention_weights", s);
    check(att.size() >= static_cast<size_t>(s.B) * s.H * s.Tq * s.Tk, "attention_weights (webgpu): att of ", att.size(),
          " floats for B * H * Tq * Tk");
    return true;
  }

  bool prepare_embedding_forward(Span x, const Ids& tokens, CSpan, CSpan, float, int B, int T, int C) {
    check(B >= 0 && T >= 0 && C >= 1 && x.size() >= static_cast<size_t>(B) * T * C && tokens.device != nullptr,
          "embedding_forward (webgpu): B = ", B, ", T = ", T, ", C = ", C, ", x of ", x.size(), " floats");
    return B * T != 0;
  }
  bool prepare_embedding_forward_quant(Span x, const Ids& tokens, int format, const uint8_t* wte,
                                       const float* wte_scales, CSpan pos, float, int B, int T, int C) {
    check_embedding_forward_quant("embedding_forward_quant (webgpu)", x.size(), tokens.device, format, wte, wte_scales,
                                  pos.size(), B, T, C);
    aligned_check("embedding_forward_quant", wte);
    return B * T != 0;
  }
  size_t embedding_backward_scratch_size(int, int) const override { return 0; }
  bool prepare_embedding_backward(Span dwte, Span, CSpan dx, const Ids&, float, int B, int T, int C, Span) {
    check(C >= 1 && dwte.size() % static_cast<size_t>(C) == 0 && dx.size() >= static_cast<size_t>(B) * T * C,
          "embedding_backward (webgpu): dwte of ", dwte.size(), " floats, dx of ", dx.size(), " for B = ", B,
          ", T = ", T, ", C = ", C);
    return B * T != 0;
  }

  bool prepare_mean_pool_forward(Span out, CSpan x, const uint8_t*, int B, int T, int C) {
    check(out.size() >= static_cast<size_t>(B) * C && x.size() >= static_cast<size_t>(B) * T * C,
          "mean_pool_forward (webgpu): spans too small for B = ", B, ", T = ", T, ", C = ", C);
    return true;
  }
  bool prepare_mean_pool_backward(Span dx, CSpan dout, const uint8_t*, int B, int T, int C) {
    check(dout.size() >= static_cast<size_t>(B) * C && dx.size() >= static_cast<size_t>(B) * T * C,
          "mean_pool_backward (webgpu): spans too small for B = ", B, ", T = ", T, ", C = ", C);
    return true;
  }

  bool prepare_crossentropy_forward(Span losses, CSpan logits, const Ids& targets, int rows, int V, int, float) {
    ce_check("crossentropy_forward", losses, logits, targets, rows, V);
    return true;
  }
  bool prepare_crossentropy_forward_backward(Span losses, Span dlogits, CSpan logits, const Ids& targets, float,
                                             int rows, int V, int, float) {
    ce_check("crossentropy_forward_backward", losses, logits, targets, rows, V);
    check(dlogits.size() >= static_cast<size_t>(rows) * V, "crossentropy_forward_backward (webgpu): dlogits of ",
          dlogits.size(), " floats for rows * V");
    return true;
  }
  bool prepare_argmax_rows(std::span<int32_t> best, CSpan logits, int rows, int V) {
    check(rows >= 0 && V >= 1 && best.size() >= static_cast<size_t>(rows) &&
              logits.size() >= static_cast<size_t>(rows) * V,
          "argmax_rows (webgpu): rows = ", rows, ", V = ", V, " for spans of ", best.size(), " and ", logits.size());
    return rows != 0;
  }

  // The ranges go to the device as quads (begin, end, l2, shrink) in scratch; the factors are computed in double
  // exactly as the CPU kernel computes them (Words::add(AdamHyper)).
  size_t adam_scratch_size(size_t ranges) const override { return 4 * ranges; }
  bool prepare_adam_step(Span p, Span m, Span v, CSpan g, std::span<const AdamRange> ranges, const AdamHyper& h,
                         Span scratch) {
    scratch_check("adam_step", scratch, adam_scratch_size(ranges.size()));
    if (ranges.empty()) return false;
    check(ranges.back().end <= p.size() && m.size() >= p.size() && v.size() >= p.size() && g.size() >= p.size(),
          "adam_step (webgpu): the last range ends at ", ranges.back().end, " for buffers of ", p.size());
    std::vector<uint32_t> quads;
    for (const AdamRange& r : ranges) {
      const float l2 = h.decoupled ? 0.f : r.weight_decay;
      const float shrink = static_cast<float>(1.0 - (h.decoupled ? static_cast<double>(h.lr) * r.weight_decay : 0.0));
      quads.insert(quads.end(), {static_cast<uint32_t>(r.begin), static_cast<uint32_t>(r.end), bits(l2), bits(shrink)});
    }
    upload(scratch.data(), quads.data(), quads.size() * 4);
    return true;
  }

  // The partial sums (one float per SUM_SQUARES_BLOCK floats) land in a buffer this backend keeps, grown as
  // needed, passed as the command's scratch; they come back to be added in double.
  size_t sum_squares_scratch_size() const override { return 0; }
  double sum_squares(CSpan x, Span) override {
    if (x.empty()) return 0.0;
    const size_t blocks = ceil_div(x.size(), webgpu::kSumSquaresBlock);
    if (partials_capacity_ < blocks) {
      if (partials_) free(partials_);
      partials_ = allocate(blocks * sizeof(float));
      partials_capacity_ = blocks;
    }
    put(Op::SumSquares, x, Span(static_cast<float*>(partials_), blocks));
    host_partials_.resize(blocks);
    download(host_partials_.data(), partials_, blocks * sizeof(float));
    double sum = 0.0;
    for (float s : host_partials_) sum += s;
    return sum;
  }

 private:
  static constexpr size_t kRowBlock = 64;  // rows per partial sum of the dw/db reductions (kernels.ts)

  static uint32_t off(const void* p) { return p ? static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) - kBase) : 0u; }
  static uint32_t n32(size_t n) {
    check(n <= UINT32_MAX, "webgpu: a span of ", n, " elements is too long for one command");
    return static_cast<uint32_t>(n);
  }
  static uint32_t lo(uint64_t x) { return static_cast<uint32_t>(x); }
  static uint32_t hi(uint64_t x) { return static_cast<uint32_t>(x >> 32); }

  static void rows_check(const char* op, int rows, int C, std::initializer_list<size_t> full,
                         std::initializer_list<size_t> per_row, std::initializer_list<size_t> per_col) {
    check(rows >= 0 && C >= 1, op, " (webgpu): rows = ", rows, ", C = ", C, ": expected rows >= 0, C >= 1");
    const size_t n = static_cast<size_t>(rows) * C;
    for (size_t s : full) check(s >= n, op, " (webgpu): a span of ", s, " floats for rows * C = ", n);
    for (size_t s : per_row)
      check(s >= static_cast<size_t>(rows), op, " (webgpu): a span of ", s, " for ", rows, " rows");
    for (size_t s : per_col) check(s >= static_cast<size_t>(C), op, " (webgpu): a span of ", s, " for C = ", C);
  }
  static void aligned_check(const char* op, const uint8_t* p) {
    check(off(p) % 4 == 0, op, " (webgpu): packed weights at byte offset ", off(p),
          ": expected a multiple of 4 (a row start)");
  }
  static void scratch_check(const char* op, Span scratch, size_t need) {
    check(scratch.size() >= need, op, " (webgpu): scratch of ", scratch.size(), " floats: expected ", need);
  }
  static void shape_check(const char* op, const AttentionShape& s) {
    check(s.B >= 0 && s.Tq >= 0 && s.Tk >= 0 && s.H >= 1 && s.C % s.H == 0 && s.ldq >= s.C && s.ldkv >= s.C &&
              s.key_rows() >= s.Tk,
          op, " (webgpu): B = ", s.B, ", Tq = ", s.Tq, ", Tk = ", s.Tk, ", C = ", s.C, ", H = ", s.H, ", ldq = ", s.ldq,
          ", ldkv = ", s.ldkv, " are inconsistent");
  }
  static void ce_check(const char* op, Span losses, CSpan logits, const Ids& targets, int rows, int V) {
    check(rows >= 0 && V >= 1 && losses.size() >= static_cast<size_t>(rows) &&
              logits.size() >= static_cast<size_t>(rows) * V && targets.device != nullptr,
          op, " (webgpu): rows = ", rows, ", V = ", V, " for losses of ", losses.size(), " and logits of ",
          logits.size());
  }
  // One command's words from its C++ arguments in declaration order, by type as ops/op_list.def's table gives
  // them for each kind (the GPU worker's readers, ops.generated.ts, follow the same table).
  struct Words {
    std::vector<uint32_t> w;
    void add(CSpan x) { w.insert(w.end(), {off(x.data()), n32(x.size())}); }
    void add(std::span<int32_t> x) { w.insert(w.end(), {off(x.data()), n32(x.size())}); }
    void add(const float* p) { w.push_back(off(p)); }
    void add(const uint8_t* p) { w.push_back(off(p)); }
    void add(const Ids& t) { w.insert(w.end(), {off(t.device), n32(t.host.size())}); }
    void add(int i) { w.push_back(u32(i)); }
    void add(float f) { w.push_back(bits(f)); }
    void add(bool b) { w.push_back(b ? 1u : 0u); }
    void add(Act a) { w.push_back(static_cast<uint32_t>(a)); }
    void add(uint64_t seed) { w.insert(w.end(), {lo(seed), hi(seed)}); }
    void add(const AttentionShape& s) {
      w.insert(w.end(), {u32(s.B), u32(s.Tq), u32(s.Tk), u32(s.C), u32(s.H), u32(s.ldq), u32(s.ldkv), off(s.key_pad),
                         s.key_pad ? 1u : 0u, s.causal ? 1u : 0u, bits(s.dropout), lo(s.seed), hi(s.seed), u32(s.q_pos),
                         u32(s.key_rows())});
    }
    void add(std::span<const AdamRange> r) { w.insert(w.end(), {n32(r.size()), n32(r.empty() ? 0 : r.back().end)}); }
    void add(const AdamHyper& h) {
      const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), h.t);
      const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), h.t);
      w.insert(w.end(), {bits(h.beta1), bits(h.beta2), bits(h.eps), bits(h.grad_scale),
                         bits(static_cast<float>(h.lr / bc1)), bits(static_cast<float>(std::sqrt(bc2)))});
    }
  };
  template <class... A>
  void put(Op op, const A&... args) {
    Words words;
    (words.add(args), ...);
    channel_.put(op, {}, words.w.data(), words.w.size());
  }

  WebGpuLimits limits_;
  Channel channel_;
  std::mutex mutex_;  // allocate/free may come from any thread (a model freed in another thread)
  ArenaAllocator arena_;
  size_t capacity_ = 0;
  void* partials_ = nullptr;
  size_t partials_capacity_ = 0;
  std::vector<float> host_partials_;
};

std::mutex registry_mutex;
std::unique_ptr<WebGpuBackend> current;
std::string unavailable = "init({ backend: \"webgpu\" }) has not connected a GPU";

}  // namespace

int32_t* webgpu_open(const WebGpuLimits& limits, size_t ring_words) {
#if defined(__EMSCRIPTEN__) && !defined(__EMSCRIPTEN_PTHREADS__)
  (void)limits;
  (void)ring_words;
  throw Error(
      "webgpu needs the threaded build (the page must be cross-origin isolated: COOP same-origin and COEP "
      "require-corp), because the core waits for the GPU worker on shared memory");
#else
  check(ring_words >= 1024 && ring_words < (1u << 30), "ring_words = ", ring_words,
        " is invalid: expected 1024 <= ring_words < 2^30");
  check(limits.max_buffer_size >= 1024 && limits.max_storage_buffer_binding_size >= 1024,
        "webgpu limits: maxBufferSize = ", limits.max_buffer_size,
        ", maxStorageBufferBindingSize = ", limits.max_storage_buffer_binding_size,
        ": expected at least 1024 bytes each");
  std::lock_guard lock(registry_mutex);
  // The previous connection's backend is kept alive (tensors made on it free into it); it is failed so that
  // nothing waits on a worker that is gone.
  static std::vector<std::unique_ptr<WebGpuBackend> > retired;
  if (current) {
    check(current->in_use() == 0, "webgpu: ", current->in_use(),
          " bytes of models are still on the WebGPU device: dispose() them before connecting again");
    current->fail("the WebGPU connection was replaced by a new init()");
    retired.push_back(std::move(current));
  }
  current = std::make_unique<WebGpuBackend>(limits, ring_words);
  return current->control_block();
#endif
}

void webgpu_fail(const std::string& why) {
  std::lock_guard lock(registry_mutex);
  if (current) current->fail(why);
  unavailable = why;
}

std::string webgpu_unavailable_reason() {
  std::lock_guard lock(registry_mutex);
  if (!current) return unavailable;
  return current->failure();
}

void webgpu_free(void* p) noexcept {
  std::lock_guard lock(registry_mutex);
  if (current) current->free(p);
}

std::string webgpu_adapter() {
  std::lock_guard lock(registry_mutex);
  return current ? current->limits().adapter : "";
}

Backend& webgpu_backend() {
  std::lock_guard lock(registry_mutex);
  check(current != nullptr, "device = webgpu is unavailable: ", unavailable);
  const std::string why = current->failure();
  check(why.empty(), "device = webgpu is unavailable: ", why);
  return *current;
}

}  // namespace qkv::ops
