#pragma once
// Atomic replacement of a file: the bytes go to a fresh temporary file beside `path` (a name no other writer
// picks, opened O_EXCL), which is flushed (fsync) and renamed over `path`; the folder is synced after (best
// effort). On failure the temporary file is removed and qkv::Error names the path, the step and the system's
// reason, with `path` unchanged. Behind write_safetensors_atomic, whole or tensor by tensor.
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace qkv::io {

// Writes all of `bytes` to `fd`, retrying short writes; false with errno set on failure.
bool write_all(int fd, std::span<const uint8_t> bytes);

// write(fd) puts the file's bytes in the temporary file (false with errno set on failure).
void write_file_atomic(const std::string& path, const std::function<bool(int)>& write);

}  // namespace qkv::io
