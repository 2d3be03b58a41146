#!/usr/bin/env bash
# Builds the WebAssembly variants of the core: build/wasm (SIMD128 + pthreads) and build/wasm-st (SIMD128,
# single-threaded fallback), each also as a relaxed-SIMD .wasm (qkv-relaxed.wasm, qkv-st-relaxed.wasm) that
# runs under the same glue.
set -euo pipefail
cd "$(dirname "$0")/.."
export NODE_PATH=/usr/share/nodejs  # Emscripten's JS optimizer needs Debian's acorn (TOOLCHAIN.md)
# Emscripten builds its system libraries into its cache on first use; Debian's cache is root-owned, so
# a non-root user gets a cache of their own.
if [ -z "${EM_CACHE:-}" ] && [ ! -w /usr/share/emscripten/cache ]; then
  export EM_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/qkv-emscripten"
fi
jobs=$(nproc)
for preset in wasm wasm-st; do
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
done
ls -l build/wasm/qkv.js build/wasm/qkv.wasm build/wasm/qkv-relaxed.wasm build/wasm/qkv.worker.js \
  build/wasm-st/qkv-st.js build/wasm-st/qkv-st.wasm build/wasm-st/qkv-st-relaxed.wasm
