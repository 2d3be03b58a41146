#!/usr/bin/env bash
# Installs what qkv needs on a fresh Debian 12 machine that has Node and a C++ compiler: the apt packages
# (only those missing, so a prepared machine skips apt entirely) and the npm packages (npm ci).
set -euo pipefail
cd "$(dirname "$0")/.."

# clang + libclang-rt-dev: libFuzzer and the sanitizer runtimes of the fuzz targets (tests/fuzz).
# openmpi-bin + libopenmpi-dev: data-parallel training (mpirun -np N qkv train) and its tests (tests/mpi).
packages=(cmake make g++ clang libclang-rt-dev libgtest-dev emscripten libxsimd-dev nlohmann-json3-dev libcli11-dev
  chromium openmpi-bin libopenmpi-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "qkv setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# npm ci only when the lock file changed since the last install (it wipes node_modules each time).
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "qkv setup: npm ci"
  npm ci --no-audit --no-fund
fi
