#!/usr/bin/env bash
# The README's test command: sets up, builds, then runs every suite — native GoogleTest (Release, then
# Debug with AddressSanitizer + UndefinedBehaviorSanitizer), Vitest in Node against the real .wasm, and
# the demo end to end in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh

echo "== native tests (Release)"
ctest --preset native -j "$(nproc)"

echo "== native tests (Debug + ASan/UBSan)"
cmake --preset native-asan >/dev/null
cmake --build --preset native-asan -j "$(nproc)"
# The learning tests (minutes of training) run in the Release suite above; under the sanitizers every
# other test exercises the same layers and kernels, in seconds.
ctest --preset native-asan -j "$(nproc)" -E "^Learning\."

echo "== web tests (Vitest, Node)"
# The native loss trajectory the wasm parity test compares against.
./build/native/tests/cpp/qkv_lm_trace > build/native/native-trace.json
npm run --silent test:web

echo "== end-to-end (headless Chromium)"
npm run --silent test:e2e
echo "qkv: all test suites passed"
