// A save killed at any moment (SIGKILL: no destructor, no cleanup) leaves the previous checkpoint intact
// and loadable. A child process saves a large checkpoint over an existing one and is killed after delays
// spread over the time a whole save takes; afterwards the file must be, byte for byte, either the old
// checkpoint or the new one, and it must load with its checksums verified.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "io/checkpoint.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"

namespace qkv::interrupted_save_test {
namespace {

namespace fs = std::filesystem;

TEST(InterruptedSave, AKilledSaveLeavesThePreviousCheckpointLoadable) {
  const fs::path dir = fs::temp_directory_path() / ("qkv_interrupted_save_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();

  // About 5 MB with the Adam moments: a save takes milliseconds to write and sync, and the test stays quick
  // under the sanitizers (each round loads and verifies the whole file).
  const LanguageModelConfig config{.vocab_size = 256, .context = 16, .d_model = 128, .heads = 4, .layers = 2};
  LanguageModel model(config);
  const std::vector<uint8_t> old_bytes = model.save(true);
  std::vector<int32_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 7 % 256);
  model.train_step(ids, ids, 2, 16);
  const std::vector<uint8_t> new_bytes = model.save(true);
  ASSERT_NE(old_bytes, new_bytes);
  io::save_file(path, old_bytes);

  // How long one whole save takes here, so the kills land before, during and after it.
  const auto t0 = std::chrono::steady_clock::now();
  io::save_file((dir / "timing.safetensors").string(), new_bytes);
  const auto full = std::chrono::steady_clock::now() - t0;
  fs::remove(dir / "timing.safetensors");

  int kept_old = 0, got_new = 0, mid_write = 0, kills = 0;
  constexpr int kKills = 8;
  // A sweep kills saves after delays spread over `span`. On a loaded machine a save may run faster than the one
  // timed above and every kill land after it: then the next sweep spreads its kills over half the span, up to
  // five sweeps, until one lands mid-write (each round checks the file either way).
  for (int sweep = 0; sweep < 5 && mid_write == 0; ++sweep) {
    const auto span = full / (1 << sweep);
    for (int k = 0; k < kKills; ++k) {
      int ready[2];
      ASSERT_EQ(::pipe(ready), 0);
      const pid_t child = ::fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        // The child only saves (the bytes were made before the fork) and never returns into the test. It says
        // when it starts, so the delays count from the save itself and not from the fork.
        ::close(ready[0]);
        const char go = 1;
        if (::write(ready[1], &go, 1) != 1) ::_exit(3);
        try {
          io::save_file(path, new_bytes);
        } catch (...) {
          ::_exit(2);
        }
        ::_exit(0);
      }
      ::close(ready[1]);
      char go = 0;
      ASSERT_EQ(::read(ready[0], &go, 1), 1);
      ::close(ready[0]);
      // Kills spread over the span; the last round lets the save finish.
      const auto delay = span * k / (kKills - 1);
      if (k < kKills - 1) {
        std::this_thread::sleep_for(delay);
        ::kill(child, SIGKILL);
        ++kills;
      }
      int status = 0;
      ASSERT_EQ(::waitpid(child, &status, 0), child);
      ASSERT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) << "kill " << k;

      int temporaries = 0;  // a killed save's temporary file: the kill landed mid-write
      for (const auto& entry : fs::directory_iterator(dir))
        temporaries += entry.path().filename().string().find(".tmp-") != std::string::npos;
      const std::vector<uint8_t> now = io::read_file(path);
      const bool is_old = now == old_bytes, is_new = now == new_bytes;
      ASSERT_TRUE(is_old || is_new) << "kill " << k << " after " << delay.count() << " ns left a file of " << now.size()
                                    << " bytes that is neither checkpoint";
      const auto loaded = LanguageModel::load_file(path);  // checksums verified
      EXPECT_EQ(loaded->step(), is_old ? 0 : 1);
      kept_old += is_old;
      got_new += is_new;
      mid_write += is_old && temporaries > 0;
      for (const auto& entry : fs::directory_iterator(dir))
        if (entry.path().filename().string().find(".tmp-") != std::string::npos) fs::remove(entry.path());
      io::save_file(path, old_bytes);  // the next round starts from the old checkpoint again
    }
  }
  // At least one kill landed while the new file was being written, and the uninterrupted save replaced it.
  EXPECT_GE(mid_write, 1);
  EXPECT_GE(got_new, 1);
  std::printf("[ %d kills: %d mid-write, %d before the rename (old file kept), %d after it; a save takes %.1f ms ]\n",
              kills, mid_write, kept_old, kills - kept_old, std::chrono::duration<double, std::milli>(full).count());
  fs::remove_all(dir);  // leftover temporary files of killed saves included
}

}  // namespace
}  // namespace qkv::interrupted_save_test
