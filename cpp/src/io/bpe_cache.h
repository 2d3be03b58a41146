#pragma once
// WordCache: the ids of pieces already encoded (text repeats its words, and a piece's merges cost far more
// than a lookup). Open addressing over flat arrays, keys and ids in two arenas: a lookup is a hash, a probe
// and one compare, where a std::unordered_map<std::string, std::vector<int32_t>> walks nodes (it was a fifth
// of the encoder's time). Append-only and bounded: past kMaxEntries it stops taking pieces.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::bpe {

class WordCache {
 public:
  static constexpr size_t kMaxEntries = 1 << 16;
  static constexpr size_t kMaxPiece = 255;  // longer pieces are not cached (they rarely repeat)

  // FNV-1a, 64 bits: pieces are a few bytes, where it is as fast as anything.
  static uint64_t hash(std::string_view s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
    return h;
  }

  // The cached ids of `piece` (hash h), or false.
  bool find(std::string_view piece, uint64_t h, std::span<const int32_t>& ids) const;
  // Stores ids for a piece not in the cache (ignored when the piece is too long or the cache full).
  void insert(std::string_view piece, uint64_t h, std::span<const int32_t> ids);

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key = 0, val = 0;  // offsets into keys_ and vals_
    uint16_t key_len = 0, val_len = 0;
    bool used = false;
  };
  void grow();

  std::vector<Slot> slots_;  // size a power of two, at most half used
  std::string keys_;
  std::vector<int32_t> vals_;
  size_t size_ = 0;
};

}  // namespace qkv::bpe
