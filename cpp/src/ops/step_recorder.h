#pragma once
// The host side of a training step launched as one unit (ops.h: Backend::begin_step), whatever launches the
// unit: which step of a key runs op by op, which is captured and which replayed; the captured ops' signatures
// and the check of a replay's walk against them; the block of values that change from step to step. The CUDA
// backend drives CUDA graphs with it (exec/cuda/step_graph.h); models/deferred_step_test.cpp drives a CPU
// executor that defers a step's ops the same way, so that the model side of the contract is tested everywhere.
//
// Per key: the first step is Eager (and plans every buffer), the next Capture, later ones Replay while its graph
// is kept (kMaxGraphs keys, least recently used dropped). A key whose capture failed stays Eager; begin(0) is Eager
// whatever was seen (a step run again).
// A replay stages its values at the offsets its capture used, in the same order: end_replay() checks that the
// walk had the capture's ops and block size.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/ops.h"

namespace qkv::ops {

class StepRecorder {
 public:
  enum class Mode { Off, Eager, Capture, Replay };
  static constexpr size_t kNotStaged = std::numeric_limits<size_t>::max();
  // Graphs kept, one per key, the least recently used dropped first: enough for the few shapes of bucketed
  // batches (a Seq2Seq's source and target lengths), small against a GPU's memory.
  static constexpr size_t kMaxGraphs = 8;

  StepRecorder() { graphs_.reserve(kMaxGraphs); }

  // Off: every step runs op by op, and every graph is dropped (set_enabled returns their handles to destroy).
  [[nodiscard]] std::vector<void*> set_enabled(bool on) {
    enabled_ = on;
    return on ? std::vector<void*>{} : drop_all();
  }
  bool enabled() const { return enabled_; }
  // Where stage() writes (pinned memory for CUDA's copy): `capacity` bytes at `host`, kept by the caller.
  void set_block(unsigned char* host, size_t capacity) { block_ = host, capacity_ = capacity; }

  Mode begin(uint64_t key) {
    key_ = key;
    cursor_ = used_ = 0;
    current_ = nullptr;
    mode_ = Mode::Eager;
    if (!enabled_ || key == 0) return mode_;
    for (uint64_t k : failed_keys_)
      if (k == key) return mode_;
    for (Graph& g : graphs_)
      if (g.key == key) {
        current_ = &g;
        g.last_use = ++clock_;
        return mode_ = Mode::Replay;
      }
    for (uint64_t k : seen_keys_)
      if (k == key) {
        signatures_.clear();
        return mode_ = Mode::Capture;
      }
    // First sight: op by op; its next step is captured.
    if (seen_keys_.size() == kMaxSeen) seen_keys_.erase(seen_keys_.begin());
    seen_keys_.push_back(key);
    return mode_;
  }
  Mode mode() const { return mode_; }
  bool active() const { return mode_ == Mode::Capture || mode_ == Mode::Replay; }
  // The replayed graph's handle (what captured() was given for it).
  void* handle() const { return current_ ? current_->handle : nullptr; }

  enum class Op { Run, Skip, Diverged };
  // Every op of a step, first, with a hash of the arguments the capture bakes in: Capture records it (Run: queue
  // the op), Replay compares it with the capture's (Skip: run nothing; Diverged: the step went another way).
  Op op(uint64_t signature) {
    if (mode_ == Mode::Capture) {
      signatures_.push_back(signature);
      return Op::Run;
    }
    if (mode_ != Mode::Replay) return Op::Run;
    const std::vector<uint64_t>& want = current_->signatures;
    if (cursor_ >= want.size() || want[cursor_] != signature) return Op::Diverged;
    ++cursor_;
    return Op::Skip;
  }

  // Bytes copied into the block at the next offset aligned to `align`: the offset, or kNotStaged outside an
  // active step or when the block is full (the step is then not worth a graph: fail(true)).
  size_t stage(const void* bytes, size_t size, size_t align) {
    if (!active()) return kNotStaged;
    const size_t at = (used_ + align - 1) / align * align;
    if (!block_ || at + size > capacity_) return kNotStaged;
    std::memcpy(block_ + at, bytes, size);
    used_ = at + size;
    return at;
  }
  size_t used() const { return used_; }

  // A capture ended with a graph (`handle`, the caller's): it is this key's now. Returns the handle of the graph
  // it displaced (the least recently used, when kMaxGraphs are kept), or null: the caller destroys it.
  [[nodiscard]] void* captured(void* handle) {
    void* evicted = nullptr;
    if (graphs_.size() == kMaxGraphs) {
      auto lru = graphs_.begin();
      for (auto it = graphs_.begin(); it != graphs_.end(); ++it)
        if (it->last_use < lru->last_use) lru = it;
      evicted = lru->handle;
      graphs_.erase(lru);
    }
    graphs_.push_back({key_, std::move(signatures_), used_, handle, ++clock_});
    signatures_.clear();
    current_ = &graphs_.back();
    mode_ = Mode::Off;
    ++counts_.captured;
    return evicted;
  }
  // A replay's end: false when the walk was not the captured one (fail(false) then).
  bool end_replay() {
    const bool same = cursor_ == current_->signatures.size() && used_ == current_->used;
    if (same) {
      mode_ = Mode::Off;
      ++counts_.replayed;
    }
    return same;
  }
  // The step must run again: a capture that failed marks its key (forget_key: op by op from then on); a replay
  // that diverged drops its graph (the key is captured again at its next step) and returns its handle for the
  // caller to destroy. The caller has ended its capture, and throws StepRetry.
  [[nodiscard]] void* fail(bool forget_key) {
    void* dropped = nullptr;
    if (mode_ == Mode::Replay && current_) {
      dropped = current_->handle;
      graphs_.erase(graphs_.begin() + (current_ - graphs_.data()));
      current_ = nullptr;
    }
    if (forget_key) failed_keys_.push_back(key_);
    mode_ = Mode::Off;
    ++counts_.retried;
    return dropped;
  }
  void end_eager() { mode_ = Mode::Off; }
  // Every graph's handle, the graphs forgotten.
  [[nodiscard]] std::vector<void*> drop_all() {
    std::vector<void*> handles;
    for (const Graph& g : graphs_) handles.push_back(g.handle);
    graphs_.clear();
    current_ = nullptr;
    return handles;
  }

  struct Counts {
    long long captured = 0, replayed = 0, retried = 0;
  };
  const Counts& counts() const { return counts_; }

 private:
  static constexpr size_t kMaxSeen = 64;
  struct Graph {
    uint64_t key;
    std::vector<uint64_t> signatures;  // the captured walk, op by op
    size_t used;                       // its block bytes
    void* handle;
    uint64_t last_use;
  };

  bool enabled_ = true;
  Mode mode_ = Mode::Off;
  uint64_t key_ = 0, clock_ = 0;
  std::vector<uint64_t> seen_keys_, failed_keys_;
  std::vector<Graph> graphs_;  // reserved: current_ points into it
  Graph* current_ = nullptr;
  std::vector<uint64_t> signatures_;  // the capture under way
  size_t cursor_ = 0, used_ = 0;
  unsigned char* block_ = nullptr;
  size_t capacity_ = 0;
  Counts counts_;
};

// A hash of the arguments an op's captured work bakes in: pointers, sizes and the values that do not change from
// step to step (FNV-1a). Structs go field by field, their padding unhashed; an AttentionShape without its seed
// (the step's value).
struct StepSignature {
  uint64_t h = 0xcbf29ce484222325ull;
  explicit StepSignature(const char* op) { bytes(op, std::strlen(op)); }
  void bytes(const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 0x100000001b3ull;
  }
  template <class T>
  requires std::is_arithmetic_v<T> || std::is_pointer_v<T> || std::is_enum_v<T>
  void add(T v) { bytes(&v, sizeof v); }
  template <class T>
  void add(std::span<T> x) {
    add(static_cast<const void*>(x.data())), add(x.size());
  }
  void add(const Ids& ids) { add(ids.device), add(ids.host.size()); }
  void add(const AttentionShape& s) {
    for (int v : {s.B, s.Tq, s.Tk, s.C, s.H, s.ldq, s.ldkv, s.q_pos, s.k_rows}) add(v);
    add(s.key_pad), add(s.causal), add(s.dropout);
  }
  void add(const AdamHyper& h) {
    add(h.lr), add(h.beta1), add(h.beta2), add(h.eps), add(h.decoupled), add(h.t), add(h.grad_scale);
  }
  template <class... A>
  static uint64_t of(const char* op, const A&... args) {
    StepSignature s(op);
    (s.add(args), ...);
    return s.h;
  }
};

// Each op's signature, from its declaration (ops/op_list.def): signature::gemm(trans_a, ..., ldc) hashes the op's
// name and its arguments by kind (op_list.def's table: a seed is left out, being the step's value; Adam's ranges
// count by their number, being host memory). An executor adds what else its captured work bakes in.
namespace signature {
#define QKV_HASH_(kind, name) QKV_HASH_##kind(name)
#define QKV_HASH_ANY(n) qkv_sig.add(n);
#define QKV_HASH_span QKV_HASH_ANY
#define QKV_HASH_cspan QKV_HASH_ANY
#define QKV_HASH_scratch QKV_HASH_ANY
#define QKV_HASH_ints QKV_HASH_ANY
#define QKV_HASH_ptr QKV_HASH_ANY
#define QKV_HASH_cptr QKV_HASH_ANY
#define QKV_HASH_bytes QKV_HASH_ANY
#define QKV_HASH_ids QKV_HASH_ANY
#define QKV_HASH_count QKV_HASH_ANY
#define QKV_HASH_int QKV_HASH_ANY
#define QKV_HASH_f32 QKV_HASH_ANY
#define QKV_HASH_flag QKV_HASH_ANY
#define QKV_HASH_act QKV_HASH_ANY
#define QKV_HASH_shape QKV_HASH_ANY
#define QKV_HASH_hyper QKV_HASH_ANY
#define QKV_HASH_seed(n) (void)n;
#define QKV_HASH_stepf(n) (void)n;
#define QKV_HASH_ranges(n) qkv_sig.add(n.size());
#define QKV_HASH_wu32(n)
#define QKV_HASH_wf32(n)
#define QKV_OP(name, Code, opcode, group, scratch)         \
  inline StepSignature name(QKV_PARAMS(QKV_ARGS_##name)) { \
    StepSignature qkv_sig(#name);                          \
    QKV_ARGS_##name(QKV_HASH_) return qkv_sig;             \
  }
#define QKV_OP_VALUE(type, name, Code, opcode, group, scratch) QKV_OP(name, Code, opcode, group, scratch)
#define QKV_SCRATCH(rule)
#define QKV_CONST(name, value)
#include "ops/op_list.def"
#undef QKV_OP
#undef QKV_OP_VALUE
#undef QKV_SCRATCH
#undef QKV_CONST
}  // namespace signature

}  // namespace qkv::ops
