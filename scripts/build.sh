#!/usr/bin/env bash
# Builds everything: the native library, tool and tests; both WebAssembly variants; the npm package
# (web/dist) and the demo (demo/dist). Incremental: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
echo "== native (build/native)"
cmake --preset native >/dev/null
cmake --build --preset native -j "$jobs"
echo "== wasm (build/wasm, build/wasm-st)"
bash scripts/build-wasm.sh
echo "== npm package (web/dist) and demo (demo/dist)"
npm run --silent build:web
npm run --silent build:demo
