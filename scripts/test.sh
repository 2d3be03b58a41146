#!/usr/bin/env bash
# The README's test command: sets up, builds, then runs every suite — native GoogleTest (Release, then
# Debug with AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer), a short bounded run of every
# parser's fuzz target, Vitest in Node against the real .wasm, and the demo end to end in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh

echo "== native tests (Release)"
ctest --preset native -j "$(nproc)"

echo "== native tests (Debug + ASan/UBSan/LSan)"
# Said explicitly rather than left to the default: every test process must end with no leak reported, and
# any UBSan finding fails its test.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}
cmake --preset native-asan >/dev/null
# Only what ctest runs: the GoogleTest suite and the qkv tool (the Cli.* and Mpi.* scripts). The benchmarks and
# the trace tools are built and warning-checked in the Release build above; under the sanitizers they would add
# minutes of compiling and linking to every run and no test.
cmake --build --preset native-asan -j "$(nproc)" --target qkv_tests qkv
# The learning tests and the quantization accuracy tests (each trains a model: seconds in Release, 2.5 minutes
# apiece under the sanitizers) run in the Release suite above; under the sanitizers every other test exercises the
# same layers and kernels, in seconds.
ctest --preset native-asan -j "$(nproc)" -E "^(Learning|QuantizeAccuracy)\."

echo "== fuzz (libFuzzer, a bounded run of each parser's target; the long run: scripts/fuzz.sh --seconds N)"
bash scripts/fuzz.sh --short

echo "== web tests (Vitest, Node)"
# The native loss trajectory the wasm parity test compares against.
./build/native/tests/cpp/qkv_lm_trace > build/native/native-trace.json
npm run --silent test:web
echo "== web tests again on the relaxed-SIMD builds (Node with V8's relaxed SIMD on)"
QKV_TEST_RELAXED_SIMD=1 npm run --silent test:web

echo "== end-to-end (headless Chromium)"
npm run --silent test:e2e
echo "qkv: all test suites passed"
