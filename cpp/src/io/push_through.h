#pragma once
// A streaming loader's push(): the caller's bytes copied through the loader's own buffer() and commit(), the one
// way bytes enter it (qkv/checkpoint_loader.h, qkv/pretrained_loader.h), so that a chunk of any size is taken.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>

#include "qkv/error.h"

namespace qkv::io {

template <class Loader>
void push_through(Loader& loader, std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    const std::span<uint8_t> to = loader.buffer();
    check(!to.empty(), "safetensors: the file ends at byte ", loader.total().value_or(loader.received()), " but ",
          bytes.size(), " more bytes follow, expected no bytes after the last tensor");
    const size_t n = std::min(to.size(), bytes.size());
    std::memcpy(to.data(), bytes.data(), n);
    loader.commit(n);
    bytes = bytes.subspan(n);
  }
}

}  // namespace qkv::io
