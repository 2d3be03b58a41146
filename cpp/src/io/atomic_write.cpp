// Writing a file so that a failure at any point leaves what was at its path untouched (io/atomic_write.h).
#include "io/atomic_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "qkv/error.h"

namespace qkv::io {

// Writes all of `bytes` to `fd`, retrying short writes; false with errno set on failure.
bool write_all(int fd, std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    const ssize_t put = ::write(fd, bytes.data(), bytes.size());
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return false;
    if (put == 0) {  // no progress and no error: treat as a full device rather than loop forever
      errno = ENOSPC;
      return false;
    }
    bytes = bytes.subspan(static_cast<size_t>(put));
  }
  return true;
}

namespace {

std::string os_error(int err) { return std::strerror(err); }

// A name beside `path` that no other writer (thread or process) picks: pid, time and a counter, and
// O_EXCL on open in case they still collide.
std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return detail::cat(path, ".tmp-", ::getpid(), "-", now, "-", counter.fetch_add(1));
}

}  // namespace

// The atomic replace behind both write_safetensors_atomic forms: write(fd) puts the file's bytes in the
// temporary file (false with errno set on failure).
void write_file_atomic(const std::string& path, const std::function<bool(int)>& write) {
  const std::string where = detail::cat("cannot save '", path, "': ");
  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    temp = temp_name(path);
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  check(fd >= 0, where, "cannot create the temporary file '", temp, "': ", os_error(errno));

  // From here on a failure removes the temporary file; `path` itself has not been touched.
  auto fail = [&](const char* step) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    throw Error(detail::cat(where, step, " '", temp, "' failed: ", os_error(err), "; '", path, "' is unchanged"));
  };
  if (!write(fd)) fail("writing");
  // fsync before rename: otherwise a crash can leave the new name pointing at a file whose data never
  // reached the disk, which is the one outcome the temporary file exists to prevent.
  if (::fsync(fd) != 0) fail("flushing");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail("closing");
  if (::rename(temp.c_str(), path.c_str()) != 0) fail("renaming");

    // Make the rename itself durable. Best effort: the file is already in place, and some file systems
    // (and Emscripten's) cannot sync a directory, which is no reason to report a failed save.
#ifdef O_DIRECTORY
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
#endif
}

}  // namespace qkv::io
