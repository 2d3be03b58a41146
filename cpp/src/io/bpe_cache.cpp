// WordCache: open addressing with linear probing; see bpe_cache.h.
#include "io/bpe_cache.h"

namespace qkv::bpe {

bool WordCache::find(std::string_view piece, uint64_t h, std::span<const int32_t>& ids) const {
  if (slots_.empty()) return false;
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (!s.used) return false;
    if (s.hash == h && s.key_len == piece.size() && std::string_view(keys_).substr(s.key, s.key_len) == piece) {
      ids = std::span<const int32_t>(vals_.data() + s.val, s.val_len);
      return true;
    }
  }
}

void WordCache::insert(std::string_view piece, uint64_t h, std::span<const int32_t> ids) {
  if (piece.size() > kMaxPiece || ids.size() > kMaxPiece || size_ >= kMaxEntries) return;
  if (2 * (size_ + 1) > slots_.size()) grow();
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].used) i = (i + 1) & mask;
  slots_[i] = {h,
               static_cast<uint32_t>(keys_.size()),
               static_cast<uint32_t>(vals_.size()),
               static_cast<uint16_t>(piece.size()),
               static_cast<uint16_t>(ids.size()),
               true};
  keys_.append(piece);
  vals_.insert(vals_.end(), ids.begin(), ids.end());
  ++size_;
}

void WordCache::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : 2 * old.size(), Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (!s.used) continue;
    size_t i = s.hash & mask;
    while (slots_[i].used) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

}  // namespace qkv::bpe
